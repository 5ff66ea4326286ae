# The LibTorch translation test: tests/libtorch/dcgan_libtorch.cpp is a LibTorch program; this
# script applies the renames listed in renames.txt ("LibTorch name => tgrad name", nothing else)
# at configure time, builds the result against tgrad and runs it as the ctest test
# libtorch_translation_dcgan. A LibTorch idiom that tgrad lacks fails the build.
set(libtorch_dir ${CMAKE_CURRENT_SOURCE_DIR}/libtorch)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
             ${libtorch_dir}/dcgan_libtorch.cpp ${libtorch_dir}/renames.txt)
file(READ ${libtorch_dir}/dcgan_libtorch.cpp translated)
file(STRINGS ${libtorch_dir}/renames.txt rename_lines)
foreach(line ${rename_lines})
  if(line MATCHES "^# " OR line STREQUAL "")
    continue()
  endif()
  string(FIND "${line}" " => " arrow)
  if(arrow EQUAL -1)
    message(FATAL_ERROR "tests/libtorch/renames.txt: '${line}' is not 'from => to'")
  endif()
  string(SUBSTRING "${line}" 0 ${arrow} from)
  math(EXPR to_start "${arrow} + 4")
  string(SUBSTRING "${line}" ${to_start} -1 to)
  string(REPLACE "${from}" "${to}" translated "${translated}")
endforeach()
set(translated_source ${CMAKE_CURRENT_BINARY_DIR}/libtorch/dcgan_tgrad.cpp)
file(CONFIGURE OUTPUT ${translated_source} CONTENT "${translated}" @ONLY)
add_executable(libtorch_dcgan ${translated_source})
target_link_libraries(libtorch_dcgan PRIVATE tgrad::tgrad)
add_test(NAME libtorch_translation_dcgan COMMAND libtorch_dcgan
         WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/libtorch)
