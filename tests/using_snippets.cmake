# Every C++ block of docs/using.md is compiled and run, so the guide stays true. A block is marked
# by the line `<!-- snippet:NAME -->` right before its ```cpp fence; the blocks of one NAME are joined
# in order into the program using_NAME.cpp (a guide may show a program in parts), which must exit 0.
# The text is scanned with string(FIND) rather than a regex list: C++ code is full of ';'.
set(DDL_USING_DOC ${PROJECT_SOURCE_DIR}/docs/using.md)
file(READ ${DDL_USING_DOC} _rest)
string(REGEX MATCHALL "```cpp\n" _fences "${_rest}")  # every C++ block must be marked: counted below
list(LENGTH _fences _cppBlocks)
set(_markedBlocks 0)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${DDL_USING_DOC})
set(_marker "<!-- snippet:")
string(LENGTH "${_marker}" _markerLength)
set(_programs "")
while(TRUE)
  string(FIND "${_rest}" "${_marker}" _at)
  if(_at EQUAL -1)
    break()
  endif()
  math(EXPR _at "${_at} + ${_markerLength}")
  string(SUBSTRING "${_rest}" ${_at} -1 _rest)
  string(FIND "${_rest}" " -->\n```cpp\n" _end)
  string(FIND "${_rest}" "\n" _lineEnd)
  if(_end EQUAL -1 OR _end GREATER _lineEnd)
    string(SUBSTRING "${_rest}" 0 ${_lineEnd} _line)
    message(FATAL_ERROR "docs/using.md: the marker \"${_marker}${_line}\" must be \"${_marker}NAME -->\" "
                        "on its own line, right before a ```cpp fence")
  endif()
  string(SUBSTRING "${_rest}" 0 ${_end} _name)
  if(NOT _name MATCHES "^[a-z0-9_]+$")
    message(FATAL_ERROR "docs/using.md: snippet name \"${_name}\" must be lower case letters, digits and '_'")
  endif()
  math(EXPR _code "${_end} + 12")  # past " -->\n```cpp\n"
  string(SUBSTRING "${_rest}" ${_code} -1 _rest)
  string(FIND "${_rest}" "```" _close)
  if(_close EQUAL -1)
    message(FATAL_ERROR "docs/using.md: snippet \"${_name}\" has no closing ``` fence")
  endif()
  string(SUBSTRING "${_rest}" 0 ${_close} _block)
  string(APPEND DDL_USING_SNIPPET_${_name} "${_block}\n")
  list(APPEND _programs ${_name})
  math(EXPR _markedBlocks "${_markedBlocks} + 1")
endwhile()
if(NOT _markedBlocks EQUAL _cppBlocks)
  message(FATAL_ERROR "docs/using.md has ${_cppBlocks} ```cpp blocks but ${_markedBlocks} marked <!-- snippet:NAME -->: "
                      "mark every C++ block so that it is compiled")
endif()
list(REMOVE_DUPLICATES _programs)
if(NOT _programs)
  message(FATAL_ERROR "docs/using.md has no ```cpp block marked <!-- snippet:NAME -->")
endif()

foreach(_name IN LISTS _programs)
  set(_source ${CMAKE_CURRENT_BINARY_DIR}/using_${_name}.cpp)
  file(CONFIGURE OUTPUT ${_source} CONTENT "${DDL_USING_SNIPPET_${_name}}" @ONLY)  # rewritten only when changed
  add_executable(ddl_using_${_name} ${_source})
  target_link_libraries(ddl_using_${_name} PRIVATE ${DDL_TEST_LIBS})  # ddl::compiled when built, ddl_programs
  ddl_program_options(ddl_using_${_name})
  ddl_light_test_options(ddl_using_${_name})  # small models, a few steps
  add_test(NAME "using.md: snippet ${_name} compiles and runs" COMMAND ddl_using_${_name}
           WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/tmp)
endforeach()
