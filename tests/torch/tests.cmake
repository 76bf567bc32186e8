# The torch.distributed backend's pytest suites (tests/torch), when nexar.torch
# is built (NEXAR_TORCH). Each test module is one ctest test.
if(NEXAR_TORCH)
  foreach(t torch_ops torch_ddp torch_timeouts)
    add_test(NAME torch.${t}
             COMMAND ${NEXAR_PYTHON_EXE} -m pytest -q -x -p no:cacheprovider
                     ${CMAKE_CURRENT_LIST_DIR}/test_${t}.py)
    # serial: 2-4 processes each with timing checks (a monitored barrier, a
    # late rank)
    set_tests_properties(torch.${t} PROPERTIES TIMEOUT 300 LABELS "python;torch"
      ENVIRONMENT "NEXAR_PYTHONPATH=${NEXAR_PYTHON_DIR}" DEPENDS nexar_torch RUN_SERIAL TRUE)
  endforeach()
endif()
