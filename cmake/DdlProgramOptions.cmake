# Compile options for ddl's own programs (tests, bench, examples); never put on the ddl::ddl target,
# so consumers keep their own flags.
function(ddl_program_options target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic)
    if(DDL_WARNINGS_AS_ERRORS)
      target_compile_options(${target} PRIVATE -Werror)
    endif()
    if(DDL_NATIVE)
      target_compile_options(${target} PRIVATE -march=native)
    endif()
    if(DDL_SANITIZE)
      target_compile_options(${target} PRIVATE -fsanitize=${DDL_SANITIZE} -fno-omit-frame-pointer
                                               -fno-sanitize-recover=all)
      target_link_options(${target} PRIVATE -fsanitize=${DDL_SANITIZE})
    endif()
  endif()
endfunction()
