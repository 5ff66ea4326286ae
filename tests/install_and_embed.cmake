# The installed package, tested as a user meets it; run by ctest as `cmake -P` (tests/CMakeLists.txt).
# Both modes install the build into a fresh prefix. MODE=headers checks the installed files and that
# no public header includes Eigen or CUDA; MODE=embed trains the demo for a few steps, builds
# examples/embed against the prefix with find_package(tgrad) and runs it on the checkpoint.
#
# Inputs (-D): MODE, BUILD_DIR, SOURCE_DIR, WORK_DIR, HAVE_CUDA; for embed also DEMO (empty when
# the examples are not built: the test is skipped), GENERATOR, CXX_COMPILER, BUILD_TYPE, CXX_FLAGS,
# EXE_LINKER_FLAGS (forwarded so that a sanitizer build links its consumer the same way).
cmake_minimum_required(VERSION 3.25)

foreach(var MODE BUILD_DIR SOURCE_DIR WORK_DIR HAVE_CUDA)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install_and_embed.cmake: -D${var}=... is required")
  endif()
endforeach()

# Runs a command; on failure prints what it was, its output, and fails the test.
function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    list(JOIN ARGN " " cmd)
    message(FATAL_ERROR "${what} failed (exit ${rc}):\n  ${cmd}\n${out}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

if(MODE STREQUAL "embed" AND NOT DEMO)
  # The test's SKIP_REGULAR_EXPRESSION matches this line.
  message("install_and_embed: skipped: the examples are not built (TGRAD_BUILD_EXAMPLES=OFF)")
  return()
endif()

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
run_step("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

if(MODE STREQUAL "headers")
  set(inc ${prefix}/include/tgrad)
  foreach(required tgrad.h core/tensor.h core/ops.h core/autograd.h core/gradcheck.h
                   core/device.h layers/nn.h layers/conv_transpose.h layers/checkpoint.h)
    if(NOT EXISTS ${inc}/${required})
      message(FATAL_ERROR "not installed: include/tgrad/${required}")
    endif()
  endforeach()
  foreach(internal core/ops_internal.h core/derivatives.h core/backend.h core/conv_geometry.h
                   cpu cuda)
    if(EXISTS ${inc}/${internal})
      message(FATAL_ERROR "installed but internal: include/tgrad/${internal}")
    endif()
  endforeach()
  file(GLOB_RECURSE config_files ${prefix}/*/tgradConfig.cmake ${prefix}/*/tgradConfigVersion.cmake
       ${prefix}/*/tgradTargets.cmake)
  list(LENGTH config_files n_config)
  if(NOT n_config EQUAL 3)
    message(FATAL_ERROR "expected tgradConfig, tgradConfigVersion and tgradTargets.cmake under "
                        "${prefix}, found: ${config_files}")
  endif()
  file(GLOB_RECURSE libraries ${prefix}/*/libtgrad.a ${prefix}/*/libtgrad.so)
  if(NOT libraries)
    message(FATAL_ERROR "no libtgrad.a or libtgrad.so under ${prefix}")
  endif()

  # Every public header: no Eigen / CUDA / other build-only dependency, and every quoted
  # include names another installed header (nothing reaches into an uninstalled file).
  set(forbidden "(Eigen|unsupported/Eigen|cuda|cublas|cudnn|curand|cub/|thrust|nvtx|nlohmann|CLI/|png)")
  file(GLOB_RECURSE headers RELATIVE ${inc} ${inc}/*.h)
  foreach(header ${headers})
    file(STRINGS ${inc}/${header} includes REGEX "^[ \t]*#[ \t]*include")
    foreach(line ${includes})
      if(line MATCHES "#[ \t]*include[ \t]*[<\"]${forbidden}")
        message(FATAL_ERROR "public header ${header} includes a build-only dependency: ${line}")
      endif()
      if(line MATCHES "#[ \t]*include[ \t]*\"([^\"]+)\"" AND NOT EXISTS ${inc}/${CMAKE_MATCH_1})
        message(FATAL_ERROR "public header ${header} includes ${CMAKE_MATCH_1}, "
                            "which is not installed")
      endif()
    endforeach()
  endforeach()

  # The exported target must not ask consumers for the header-only build dependencies.
  foreach(targets_file ${config_files})
    file(READ ${targets_file} text)
    if(text MATCHES "(Eigen3|nlohmann)")
      message(FATAL_ERROR "${targets_file} names ${CMAKE_MATCH_1}, a build-only dependency")
    endif()
  endforeach()
  list(LENGTH headers n_headers)
  message("install_headers: ${n_headers} public headers, none includes Eigen or CUDA; "
          "package files and ${libraries} installed")
  return()
endif()

if(NOT MODE STREQUAL "embed")
  message(FATAL_ERROR "install_and_embed.cmake: MODE must be headers or embed, not '${MODE}'")
endif()

# 1. A checkpoint from the demo, trained briefly on the CPU.
run_step("the upsampling_decoder demo" ${DEMO} --steps 20 --out ${WORK_DIR}/run --device cpu)
set(checkpoint ${WORK_DIR}/run/decoder.safetensors)
if(NOT EXISTS ${checkpoint})
  message(FATAL_ERROR "the demo wrote no ${checkpoint}:\n${step_output}")
endif()

# 2. examples/embed, configured against the prefix only (no package registry, no build tree),
# with warnings as errors.
set(app ${WORK_DIR}/app)
run_step("configuring examples/embed" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/embed -B ${app}
         -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=${BUILD_TYPE}
         "-DCMAKE_CXX_FLAGS=${CXX_FLAGS} -Wall -Wextra -Wpedantic -Werror"
         "-DCMAKE_EXE_LINKER_FLAGS=${EXE_LINKER_FLAGS}" -DCMAKE_PREFIX_PATH=${prefix}
         -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)
file(STRINGS ${app}/CMakeCache.txt tgrad_dir REGEX "^tgrad_DIR:")
string(FIND "${tgrad_dir}" "=${prefix}/" at)
if(at EQUAL -1)
  message(FATAL_ERROR "examples/embed found tgrad outside the prefix ${prefix}: ${tgrad_dir}")
endif()
file(STRINGS ${app}/CMakeCache.txt cuda_dir REGEX "^CUDAToolkit_BIN_DIR:")
if(HAVE_CUDA AND NOT cuda_dir)
  message(FATAL_ERROR "tgrad was built with CUDA but its package did not find CUDAToolkit")
elseif(NOT HAVE_CUDA AND cuda_dir)
  message(FATAL_ERROR "tgrad was built without CUDA but its package looked for CUDAToolkit")
endif()

# The consumer compiles with the installed headers alone: its only include path is the
# prefix's (no Eigen, no CUDA).
file(READ ${app}/compile_commands.json commands)
string(REGEX MATCHALL "-(I|isystem) ?[^ \"]+" include_flags "${commands}")
foreach(flag ${include_flags})
  string(REGEX REPLACE "^-(I|isystem) ?" "" dir "${flag}")
  string(FIND "${dir}" "${prefix}/include" at)
  if(NOT at EQUAL 0)
    message(FATAL_ERROR "examples/embed compiles with an include path outside the prefix: ${dir}")
  endif()
endforeach()
if(NOT include_flags)
  message(FATAL_ERROR "no include path in ${app}/compile_commands.json")
endif()
run_step("building examples/embed" ${CMAKE_COMMAND} --build ${app} --parallel 2)

# 3. Inference on the checkpoint: the output shape and a finite checksum inside the sigmoid's
# range (3 images x 3 channels x 32 x 32 values in (0, 1)).
run_step("examples/embed" ${app}/embed ${checkpoint})
message("${step_output}")
if(NOT step_output MATCHES "output shape \\[3, 3, 32, 32\\]")
  message(FATAL_ERROR "examples/embed printed no 'output shape [3, 3, 32, 32]'")
endif()
if(NOT step_output MATCHES "checksum ([0-9.e+-]+)\n")
  message(FATAL_ERROR "examples/embed printed no finite checksum")
endif()
set(checksum ${CMAKE_MATCH_1})
if(NOT checksum GREATER 0 OR NOT checksum LESS 9216)
  message(FATAL_ERROR "checksum ${checksum} is outside (0, 9216)")
endif()
message("install_and_embed: examples/embed built against ${prefix} and decoded the checkpoint")
