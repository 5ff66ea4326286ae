# Gives one level's compiled CPU kernels symbols of their own: every weak symbol an object defines
# (inline functions and template instances: Eigen, the standard library, tgrad's headers) and
# every COMDAT group signature gets SUFFIX, so that the linker cannot merge them with another
# level's copies. Strong symbols (the kernels in tgrad::cpu::isa_<level>) and undefined ones keep
# their names. Then it checks the result and fails the build if any symbol could still be shared:
# a weak symbol or COMDAT group without the suffix, or a strong one outside NAMESPACE.
# Run as: cmake -DNM= -DOBJCOPY= -DREADELF= -DSUFFIX= -DNAMESPACE=isa_avx2 -DOBJECTS=a.o;b.o
#               -DOUTPUTS=x/a.o;x/b.o -P isa_objects.cmake
foreach(var NM OBJCOPY READELF SUFFIX NAMESPACE OBJECTS OUTPUTS)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "isa_objects.cmake: ${var} is not set")
  endif()
endforeach()

foreach(out IN LISTS OUTPUTS)
  get_filename_component(stem ${out} NAME_WE)
  get_filename_component(out_dir ${out} DIRECTORY)
  # The object of source <stem>.cpp is <stem>.cpp.o (or .obj) in CMake's object directory.
  set(obj "")
  foreach(candidate IN LISTS OBJECTS)
    get_filename_component(name ${candidate} NAME)
    if(name MATCHES "^${stem}\\.")
      set(obj ${candidate})
    endif()
  endforeach()
  if(obj STREQUAL "")
    message(FATAL_ERROR "isa_objects.cmake: no object for ${stem} among ${OBJECTS}")
  endif()
  execute_process(COMMAND ${NM} --defined-only ${obj} OUTPUT_VARIABLE symbols
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "isa_objects.cmake: ${NM} ${obj} failed (${rc})")
  endif()
  # nm lines: "<value> <type> <name>". W/V: weak function/object, u: unique global (static
  # locals of inline functions), n: the local symbols naming COMDAT groups (e.g. C5/D5
  # constructor groups) -- a group whose signature kept its name would still be merged.
  string(REPLACE "\n" ";" lines "${symbols}")
  set(map "")
  foreach(line IN LISTS lines)
    if(line MATCHES "^[0-9a-fA-F]* ([WVun]) (.+)$")
      string(APPEND map "${CMAKE_MATCH_2} ${CMAKE_MATCH_2}${SUFFIX}\n")
    endif()
  endforeach()
  file(MAKE_DIRECTORY ${out_dir})
  file(WRITE ${out}.syms "${map}")
  execute_process(COMMAND ${OBJCOPY} --redefine-syms=${out}.syms ${obj} ${out} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "isa_objects.cmake: ${OBJCOPY} on ${obj} failed (${rc})")
  endif()

  # The check. Strong globals must be tgrad::cpu::<NAMESPACE>'s (mangled "3cpu<len><NAMESPACE>").
  string(LENGTH "${NAMESPACE}" ns_len)
  execute_process(COMMAND ${NM} --defined-only ${out} OUTPUT_VARIABLE symbols)
  string(REPLACE "\n" ";" lines "${symbols}")
  foreach(line IN LISTS lines)
    if(line MATCHES "^[0-9a-fA-F]* ([WVu]) (.+)$" AND NOT CMAKE_MATCH_2 MATCHES "${SUFFIX}$")
      message(FATAL_ERROR "isa_objects.cmake: ${out}: weak symbol ${CMAKE_MATCH_2} kept its name")
    endif()
    if(line MATCHES "^[0-9a-fA-F]* ([TDBR]) (.+)$"
       AND NOT CMAKE_MATCH_2 MATCHES "3cpu${ns_len}${NAMESPACE}")
      message(FATAL_ERROR "isa_objects.cmake: ${out}: global ${CMAKE_MATCH_2} is outside "
                          "tgrad::cpu::${NAMESPACE}")
    endif()
  endforeach()
  execute_process(COMMAND ${READELF} -gW ${out} OUTPUT_VARIABLE groups)
  string(REPLACE "\n" ";" lines "${groups}")
  foreach(line IN LISTS lines)
    if(line MATCHES "COMDAT group section .* \\[(.+)\\] contains" AND NOT CMAKE_MATCH_1 MATCHES
                                                                          "${SUFFIX}$")
      message(FATAL_ERROR "isa_objects.cmake: ${out}: COMDAT group ${CMAKE_MATCH_1} kept its name")
    endif()
  endforeach()
endforeach()
