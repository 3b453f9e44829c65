# cmake -DMODE=install|subdirectory|ops-only -DDDL_SOURCE_DIR=... -DWORK_DIR=... -DCXX=... -P run_consumer.cmake
# Builds tests/consumer against ddl and runs it; any failing step fails the test. ops-only installs and
# consumes ddl with nlohmann-json hidden from CMake and builds ops_only.cpp: the operator needs Eigen alone.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()
set(consumer_src ${CMAKE_CURRENT_LIST_DIR})
if(MODE STREQUAL "install" OR MODE STREQUAL "ops-only")
  set(hide "")
  set(source main.cpp)
  if(MODE STREQUAL "ops-only")
    set(hide -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON)
    set(source ops_only.cpp)
  endif()
  step(${CMAKE_COMMAND} -S ${DDL_SOURCE_DIR} -B ${WORK_DIR}/ddl-build -DCMAKE_CXX_COMPILER=${CXX}
       -DDDL_BUILD_TESTS=OFF -DDDL_BUILD_BENCH=OFF -DDDL_BUILD_EXAMPLES=OFF -DDDL_INSTALL=ON
       -DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix ${hide})
  step(${CMAKE_COMMAND} --install ${WORK_DIR}/ddl-build)
  step(${CMAKE_COMMAND} -S ${consumer_src} -B ${WORK_DIR}/build -DCMAKE_CXX_COMPILER=${CXX}
       -DDDL_MODE=install -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DDDL_CONSUMER_SOURCE=${source} ${hide})
else()
  step(${CMAKE_COMMAND} -S ${consumer_src} -B ${WORK_DIR}/build -DCMAKE_CXX_COMPILER=${CXX}
       -DDDL_MODE=subdirectory -DDDL_SOURCE_DIR=${DDL_SOURCE_DIR})
endif()
step(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
step(${WORK_DIR}/build/consumer)
