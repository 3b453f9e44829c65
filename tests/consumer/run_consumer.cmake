# cmake -DMODE=<mode> -DDDL_SOURCE_DIR=... -DWORK_DIR=... -DCXX=... [-DCOMPONENTS=json,mpi] -P run_consumer.cmake
# Builds tests/consumer against ddl and runs it; any failing step fails the test. Modes:
#   core          the README's install line with Catch2, Google Benchmark and every optional package
#                 hidden (their parts skipped with a notice); ddl::ddl must then work with the optional
#                 packages (nlohmann-json, OpenMP, zlib, MPI) hidden from the consumer's CMake too; and
#                 README.md's snippet (<ddl/ddl.hpp>) must build and run with Eigen alone: DDL_WITH_JSON=0,
#                 as where nlohmann-json's header is absent (on this machine it may be present)
#   components    installed package, COMPONENTS given: each ddl::<c> switches its part on
#   missing       installed package: a required component whose dependency is hidden fails find_package
#                 with a message naming the Debian package; the same component as OPTIONAL gives no
#                 target and ddl_<c>_FOUND false; an unknown component fails
#   subdirectory  add_subdirectory(ddl), with ddl::json
#   fetchcontent  FetchContent_MakeAvailable(ddl), with ddl::json
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
  set(configure_output "${out}" PARENT_SCOPE)
endfunction()
# failing_step(<regex> cmd...): the command must fail and say <regex>.
function(failing_step expected)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0 OR NOT "${out}${err}" MATCHES "${expected}")
    message(FATAL_ERROR "expected a failure saying '${expected}' (exit ${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "failed as expected: ${expected}")
endfunction()
set(src ${CMAKE_CURRENT_LIST_DIR})
set(hide_all -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON -DCMAKE_DISABLE_FIND_PACKAGE_OpenMP=ON
             -DCMAKE_DISABLE_FIND_PACKAGE_ZLIB=ON -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON)
set(consumer -S ${src} -B ${WORK_DIR}/build -DCMAKE_CXX_COMPILER=${CXX})
if(MODE STREQUAL "core")
  # The README's install line as printed (tests, benchmarks and examples on, as at top level) on a
  # machine that has Eigen but neither Catch2, Google Benchmark nor nlohmann-json: each part that needs
  # them is skipped with one line, and the install needs no build.
  step(${CMAKE_COMMAND} -S ${DDL_SOURCE_DIR} -B ${WORK_DIR}/ddl-build -DCMAKE_CXX_COMPILER=${CXX}
       -DCMAKE_DISABLE_FIND_PACKAGE_Catch2=ON -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON ${hide_all})
  foreach(part tests benchmarks examples)
    if(NOT configure_output MATCHES "ddl: ${part} skipped: ")
      message(FATAL_ERROR "configuring without Catch2, Google Benchmark and nlohmann-json did not say '${part} skipped':\n${configure_output}")
    endif()
  endforeach()
  step(${CMAKE_COMMAND} --install ${WORK_DIR}/ddl-build --prefix ${WORK_DIR}/prefix)
  # The installed README's links into docs/ lead to installed files.
  file(GLOB_RECURSE readmes ${WORK_DIR}/prefix/README.md)
  list(LENGTH readmes n)
  if(NOT n EQUAL 1)
    message(FATAL_ERROR "the install holds ${n} README.md files, expected 1: ${readmes}")
  endif()
  get_filename_component(docdir ${readmes} DIRECTORY)
  file(READ ${readmes} readme)
  string(REGEX MATCHALL "\\(docs/[A-Za-z0-9_./-]+" links "${readme}")  # "(docs/x.md" of each [text](docs/x.md)
  if(NOT links)
    message(FATAL_ERROR "the installed README.md links nothing in docs/")
  endif()
  foreach(link IN LISTS links)
    string(SUBSTRING "${link}" 1 -1 target)
    if(NOT EXISTS ${docdir}/${target})
      message(FATAL_ERROR "the installed README.md links ${target}, which the install lacks (${docdir})")
    endif()
  endforeach()
  list(APPEND consumer -DDDL_MODE=install -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
elseif(MODE MATCHES "^(components|missing)$")
  # Installed on the machine as it is: what it found must not leak into the package.
  step(${CMAKE_COMMAND} -S ${DDL_SOURCE_DIR} -B ${WORK_DIR}/ddl-build -DCMAKE_CXX_COMPILER=${CXX}
       -DDDL_BUILD_TESTS=OFF -DDDL_BUILD_BENCH=OFF -DDDL_BUILD_EXAMPLES=OFF -DDDL_INSTALL=ON
       -DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix)
  step(${CMAKE_COMMAND} --install ${WORK_DIR}/ddl-build)
  list(APPEND consumer -DDDL_MODE=install -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
endif()
if(MODE STREQUAL "core")
  step(${CMAKE_COMMAND} ${consumer} ${hide_all} -DDDL_CONSUMER_SOURCE=core_only.cpp)
elseif(MODE STREQUAL "components")
  string(REPLACE "," "\\;" comps "${COMPONENTS}")
  step(${CMAKE_COMMAND} ${consumer} "-DDDL_COMPONENTS=${comps}" -DDDL_CONSUMER_SOURCE=main.cpp)
elseif(MODE STREQUAL "missing")
  failing_step("ddl component 'mpi' needs MPI \\(Debian: libopenmpi-dev\\)"
               ${CMAKE_COMMAND} ${consumer} -DDDL_COMPONENTS=mpi -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON)
  file(REMOVE_RECURSE ${WORK_DIR}/build)
  failing_step("ddl has no component 'blas'" ${CMAKE_COMMAND} ${consumer} -DDDL_COMPONENTS=blas)
  file(REMOVE_RECURSE ${WORK_DIR}/build)
  step(${CMAKE_COMMAND} ${consumer} ${hide_all} "-DDDL_OPTIONAL_COMPONENTS=mpi\\;zlib" -DDDL_CONSUMER_SOURCE=core_only.cpp)
elseif(MODE STREQUAL "subdirectory")
  step(${CMAKE_COMMAND} ${consumer} -DDDL_MODE=subdirectory -DDDL_SOURCE_DIR=${DDL_SOURCE_DIR}
       -DDDL_OPTIONAL_COMPONENTS=json -DDDL_CONSUMER_SOURCE=main.cpp)
elseif(MODE STREQUAL "fetchcontent")
  step(${CMAKE_COMMAND} ${consumer} -DDDL_MODE=fetchcontent -DFETCHCONTENT_SOURCE_DIR_DDL=${DDL_SOURCE_DIR}
       -DDDL_OPTIONAL_COMPONENTS=json -DDDL_CONSUMER_SOURCE=main.cpp)
else()
  message(FATAL_ERROR "run_consumer.cmake: unknown MODE '${MODE}'")
endif()
step(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
step(${WORK_DIR}/build/consumer)
if(MODE STREQUAL "core")  # the umbrella header with Eigen alone, as the README's snippet uses it
  file(READ ${DDL_SOURCE_DIR}/README.md readme)
  string(REGEX MATCH "<!-- snippet:begin -->[^`]*```cpp\n(.*)```[^`]*<!-- snippet:end -->" _ "${readme}")
  if(NOT CMAKE_MATCH_1)
    message(FATAL_ERROR "README.md has no ```cpp block between <!-- snippet:begin --> and <!-- snippet:end -->")
  endif()
  file(WRITE ${WORK_DIR}/readme_snippet.cpp "${CMAKE_MATCH_1}")
  list(REMOVE_ITEM consumer -B ${WORK_DIR}/build)
  step(${CMAKE_COMMAND} ${consumer} -B ${WORK_DIR}/build-readme ${hide_all}
       -DDDL_CONSUMER_SOURCE=${WORK_DIR}/readme_snippet.cpp -DDDL_CONSUMER_DEFINITIONS=DDL_WITH_JSON=0)
  step(${CMAKE_COMMAND} --build ${WORK_DIR}/build-readme)
  step(${WORK_DIR}/build-readme/consumer)
endif()
