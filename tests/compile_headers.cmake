# Compiles every public header alone (twice, so the include guard is tested too), as a user's strictest
# build would, without ddl's optional dependencies (OpenMP, zlib, MPI):
# -std=c++17 -fsyntax-only -Wall -Wextra -Wpedantic -Werror. The header of an optional part must
# instead stop with its #error naming the CMake target that brings the dependency: the MPI header
# without MPI, and a JSON header with DDL_WITH_JSON=0 (nlohmann-json absent).
# With EIGEN_ONLY_AREAS set (e.g. "core;ops"), the headers of those areas must also not reach any
# header beyond Eigen and the standard library: no nlohmann-json, zlib or OpenMP (checked with -M).
# PART and PARTS (default 0 and 1) split the work round-robin, so that PARTS ctest entries run it in
# parallel; part 0 also checks the #errors of the optional parts.
# Eigen/Core is parsed once, into a precompiled header (clang's .pch, g++'s .gch) that the headers whose
# include closure reaches Eigen/Core take first: it is most of each unit's time, and for those headers it
# changes nothing the check can see (the closure brings Eigen/Core and the standard headers it includes
# anyway). The headers that never reach Eigen compile without it, so their own standard includes are
# still checked, as are Eigen's other modules (Eigenvalues, LU), which the precompiled header leaves out.
#   cmake -DCXX=... -DINCLUDE_DIR=... -DEIGEN_DIR=... -DWORK_DIR=... [-DEIGEN_ONLY_AREAS="core;ops"]
#         [-DPART=i -DPARTS=n] -P compile_headers.cmake
cmake_policy(SET CMP0057 NEW)  # if(... IN_LIST ...) in script mode
foreach(var CXX INCLUDE_DIR EIGEN_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "compile_headers.cmake: -D${var}=... is required")
  endif()
endforeach()
if(NOT DEFINED PARTS)
  set(PARTS 1)
  set(PART 0)
endif()
# mine(list_var): keeps the entries i with i % PARTS == PART.
function(mine list_var)
  set(kept "")
  set(i 0)
  foreach(item IN LISTS ${list_var})
    math(EXPR owner "${i} % ${PARTS}")
    if(owner EQUAL PART)
      list(APPEND kept ${item})
    endif()
    math(EXPR i "${i} + 1")
  endforeach()
  set(${list_var} "${kept}" PARENT_SCOPE)
endfunction()
file(GLOB_RECURSE headers RELATIVE ${INCLUDE_DIR} ${INCLUDE_DIR}/ddl/*.hpp)
list(SORT headers)
set(flags -std=c++17 -Wall -Wextra -Wpedantic -Werror -DDDL_WITH_OPENMP=0 -DDDL_WITH_ZLIB=0 -DDDL_WITH_MPI=0
          -I${INCLUDE_DIR} -isystem ${EIGEN_DIR} -x c++)
set(failed "")
file(MAKE_DIRECTORY ${WORK_DIR})
# One translation unit per header that includes it, as a user's source file does.
function(unit_of header out)
  string(MAKE_C_IDENTIFIER "${header}" id)
  set(tu ${WORK_DIR}/${id}.cpp)
  file(WRITE ${tu} "#include <${header}>\n#include <${header}>  // the include guard works\n")
  set(${out} ${tu} PARENT_SCOPE)
endfunction()
# Optional parts: the header, the flag that takes its dependency away, the target the #error must name.
set(optional_parts "ddl/distributed/mpi_communicator.hpp|-DDDL_WITH_MPI=0|ddl::mpi"
                   "ddl/distributed/mpi_session.hpp|-DDDL_WITH_MPI=0|ddl::mpi"
                   "ddl/io/checkpoint.hpp|-DDDL_WITH_JSON=0|ddl::json"
                   "ddl/dnnl/bf16.hpp|-DDDL_WITH_DNNL=0|ddl::dnnl"
                   "ddl/dnnl/convolution.hpp|-DDDL_WITH_DNNL=0|ddl::dnnl"
                   "ddl/dnnl/matmul.hpp|-DDDL_WITH_DNNL=0|ddl::dnnl")
if(NOT PART EQUAL 0)
  set(optional_parts "")
endif()
foreach(part IN LISTS optional_parts)
  string(REPLACE "|" ";" part "${part}")
  list(GET part 0 h)
  list(GET part 1 off)
  list(GET part 2 target)
  unit_of(${h} tu)
  execute_process(COMMAND ${CXX} ${flags} ${off} -fsyntax-only ${tu}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0 OR NOT err MATCHES "#error[^\n]*${target}")
    message("${h} with ${off}: expected an #error naming ${target}, got (exit ${rc}):\n${err}")
    list(APPEND failed ${h})
  endif()
endforeach()
# Need MPI, oneDNN: their #error is checked above.
list(REMOVE_ITEM headers ddl/distributed/mpi_communicator.hpp ddl/distributed/mpi_session.hpp
     ddl/dnnl/bf16.hpp ddl/dnnl/convolution.hpp ddl/dnnl/matmul.hpp)
mine(headers)

# reaches_eigen(header out): whether the header's closure of ddl includes (followed textually, whatever
# #if surrounds them) includes <Eigen/Core> or <Eigen/Dense>.
function(reaches_eigen header out)
  set(todo ${header})
  set(seen "")
  while(todo)
    list(POP_FRONT todo h)
    if(h IN_LIST seen OR NOT EXISTS ${INCLUDE_DIR}/${h})
      continue()
    endif()
    list(APPEND seen ${h})
    file(STRINGS ${INCLUDE_DIR}/${h} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]")
    foreach(line IN LISTS lines)
      if(line MATCHES "[<\"]Eigen/(Core|Dense)[>\"]")
        set(${out} TRUE PARENT_SCOPE)
        return()
      endif()
      if(line MATCHES "[<\"](ddl/[^>\"]+)[>\"]")
        list(APPEND todo ${CMAKE_MATCH_1})
      endif()
    endforeach()
  endwhile()
  set(${out} FALSE PARENT_SCOPE)
endfunction()

# The precompiled Eigen/Core, built with the flags of every unit; -include finds it next to its header.
set(pch_header ${WORK_DIR}/eigen_core.hpp)
file(WRITE ${pch_header} "#include <Eigen/Core>\n")
execute_process(COMMAND ${CXX} --version OUTPUT_VARIABLE cxx_version)
if(cxx_version MATCHES "clang")
  set(pch_file ${pch_header}.pch)
else()
  set(pch_file ${pch_header}.gch)
endif()
string(REPLACE ";-x;c++" ";-x;c++-header" header_flags "${flags}")
execute_process(COMMAND ${CXX} ${header_flags} ${pch_header} -o ${pch_file}
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "compile_headers.cmake: precompiling Eigen/Core failed:\n${err}")
endif()

foreach(h IN LISTS headers)
  unit_of(${h} tu)
  reaches_eigen(${h} eigen)
  set(pch "")
  if(eigen)
    set(pch -include ${pch_header})
  endif()
  execute_process(COMMAND ${CXX} ${flags} ${pch} -fsyntax-only ${tu}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message("${h}: does not compile alone without OpenMP and zlib:\n${out}${err}")
    list(APPEND failed ${h})
  endif()
endforeach()
foreach(area IN LISTS EIGEN_ONLY_AREAS)
  file(GLOB area_headers RELATIVE ${INCLUDE_DIR} ${INCLUDE_DIR}/ddl/${area}/*.hpp)
  list(SORT area_headers)
  mine(area_headers)
  foreach(h IN LISTS area_headers)
    unit_of(${h} tu)
    # DDL_WITH_JSON given: clang lists the header that config.hpp's __has_include probes as a dependency.
    execute_process(COMMAND ${CXX} ${flags} -DDDL_WITH_JSON=1 -M ${tu}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE deps ERROR_VARIABLE err)
    if(NOT rc EQUAL 0 OR deps MATCHES "nlohmann|zlib\\.h|omp\\.h|mpi\\.h")
      string(REGEX MATCHALL "[^ \n\\\\]*(nlohmann|zlib\\.h|omp\\.h)[^ \n\\\\]*" reached "${deps}")
      message("${h}: needs more than Eigen: ${reached}${err}")
      list(APPEND failed ${h})
    endif()
  endforeach()
endforeach()
list(LENGTH headers count)
if(failed)
  message(FATAL_ERROR "${CXX}: these headers failed: ${failed}")
endif()
string(CONCAT summary "${CXX}: ${count} headers (part ${PART} of ${PARTS}) compile alone without OpenMP, zlib and MPI under "
            "-Wall -Wextra -Wpedantic -Werror")
if(PART EQUAL 0)
  string(APPEND summary "; the MPI and JSON headers stop with #error naming ddl::mpi and ddl::json")
endif()
message(STATUS "${summary}")
