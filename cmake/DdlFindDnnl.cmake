# oneDNN for ddl::dnnl: its header and library, as the imported target ddl_onednn; DDL_DNNL_FOUND says
# whether both were found. Found by path, not by oneDNN's own package file: Debian's names OpenCL as a
# dependency, which a CPU-only build does not need.
if(NOT TARGET ddl_onednn)
  find_path(DDL_DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
  find_library(DDL_DNNL_LIBRARY dnnl)
  set(DDL_DNNL_FOUND OFF)
  if(DDL_DNNL_INCLUDE_DIR AND DDL_DNNL_LIBRARY)
    add_library(ddl_onednn UNKNOWN IMPORTED)
    set_target_properties(ddl_onednn PROPERTIES IMPORTED_LOCATION "${DDL_DNNL_LIBRARY}"
                                                INTERFACE_INCLUDE_DIRECTORIES "${DDL_DNNL_INCLUDE_DIR}")
    set(DDL_DNNL_FOUND ON)
  endif()
else()
  set(DDL_DNNL_FOUND ON)
endif()
