# Device buffers (issue 13): the poisoned-device adapter (device memory kept
# PROT_NONE, opened only inside the adapter's callbacks) on every collective
# and p2p form, compared bit for bit with host buffers.
set(NX_DEV_DIR ${CMAKE_CURRENT_LIST_DIR})
add_executable(dev_test ${NX_DEV_DIR}/dev_test.c ${NX_DEV_DIR}/poison_dev.c)
target_include_directories(dev_test PRIVATE ${NX_DEV_DIR})
target_link_libraries(dev_test PRIVATE nexar_internal)
add_test(NAME device.threads COMMAND dev_test threads)
# async: events done at issue (the hang of issue 13: a gate opened by an
# event the run's own poll found done was never advanced again); async_slow:
# events pending 300 us, found by the run's re-polls.
add_test(NAME device.async COMMAND dev_test async)
add_test(NAME device.async_slow COMMAND dev_test async_slow)
add_test(NAME device.procs COMMAND dev_test procs)
add_test(NAME device.bulk_tcp COMMAND dev_test threads)
add_test(NAME device.fail COMMAND dev_test fail)
# relayed paths (issue 12): a hypercube and a ring of the same ranks, where
# some pairs have no connection
add_test(NAME device.sparse_hypercube COMMAND dev_test threads)
add_test(NAME device.sparse_ring COMMAND dev_test threads)
set_tests_properties(device.sparse_hypercube PROPERTIES TIMEOUT 120 LABELS "device;collective;p2p"
                     ENVIRONMENT "NEXAR_TOPOLOGY=hypercube")
set_tests_properties(device.sparse_ring PROPERTIES TIMEOUT 120 LABELS "device;collective;p2p"
                     ENVIRONMENT "NEXAR_TOPOLOGY=k_regular:2")
set_tests_properties(device.threads device.async device.async_slow device.procs device.fail
                     PROPERTIES TIMEOUT 120
                     LABELS "device;collective;p2p")
set_tests_properties(device.bulk_tcp PROPERTIES TIMEOUT 120 LABELS "device;collective;p2p;bulk"
                     ENVIRONMENT "NEXAR_BULK_TCP_LOCAL=1;NEXAR_BULK_MIN_BYTES=0")
# libnexar-cuda: skipped (77) without a CUDA device; the missing-library
# path is checked either way.
if(TARGET nexar_cuda)
  # dev_test on a real device (NEXAR_DEV_TEST_CUDA=<ordinal>, scripts/gpu_check.sh)
  target_sources(dev_test PRIVATE ${NX_DEV_DIR}/cuda_dev.c)
  target_compile_definitions(dev_test PRIVATE NX_DEV_CUDA)
  target_link_libraries(dev_test PRIVATE nexar_cuda ${CMAKE_DL_LIBS})
  add_executable(cuda_smoke ${NX_DEV_DIR}/cuda_smoke.c)
  target_link_libraries(cuda_smoke PRIVATE nexar nexar_cuda Threads::Threads ${CMAKE_DL_LIBS})
  add_test(NAME device.cuda_smoke COMMAND cuda_smoke)
  set_tests_properties(device.cuda_smoke PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                       LABELS "device;cuda")
endif()
