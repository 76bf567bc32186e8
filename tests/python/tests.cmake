# The Python package's tests (Debian's python3 -m pytest), against the
# package built in <build>/python, never an installed copy. Each file runs
# twice: with numpy, and with numpy blocked (nonumpy/sitecustomize.py).
if(NOT NEXAR_PYTHON_BUILT)
  return()
endif()
execute_process(COMMAND ${NEXAR_PYTHON_EXE} -c "import pytest" RESULT_VARIABLE nx_no_pytest
                OUTPUT_QUIET ERROR_QUIET)
if(nx_no_pytest)
  message(STATUS "nexar: Python tests not registered (no pytest for ${NEXAR_PYTHON_EXE}: "
                 "apt install python3-pytest, or run scripts/deps.sh)")
  return()
endif()
set(nx_pydir ${CMAKE_CURRENT_SOURCE_DIR}/python)
# An ASan build's extension needs the runtime loaded first; Python's own
# allocator is bypassed (PYTHONMALLOC=malloc) so ASan sees every buffer, and
# the interpreter's exit-time leaks are not ours (detect_leaks=0).
set(nx_pyenv "")
if(NEXAR_ASAN)
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so
                  OUTPUT_VARIABLE nx_asan OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(nx_pyenv "LD_PRELOAD=${nx_asan};PYTHONMALLOC=malloc;ASAN_OPTIONS=detect_leaks=0:abort_on_error=1")
endif()
foreach(t ops procs threads process_checks errors stubs recovery)
  foreach(mode numpy nonumpy)
    if(mode STREQUAL "numpy")
      set(nx_pp "${NEXAR_PY_OUT}:${nx_pydir}")
      set(name python.${t})
    else()
      set(nx_pp "${nx_pydir}/nonumpy:${NEXAR_PY_OUT}:${nx_pydir}")
      set(name python.${t}.nonumpy)
    endif()
    add_test(NAME ${name}
             COMMAND ${NEXAR_PYTHON_EXE} -m pytest -q -p no:cacheprovider ${nx_pydir}/test_${t}.py
             WORKING_DIRECTORY ${nx_pydir})
    set_tests_properties(${name} PROPERTIES TIMEOUT 240 LABELS "python"
                         ENVIRONMENT "PYTHONPATH=${nx_pp};PYTHONDONTWRITEBYTECODE=1;${nx_pyenv}")
  endforeach()
endforeach()
