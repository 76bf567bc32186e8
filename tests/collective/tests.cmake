# Collective tests (included from tests/CMakeLists.txt). Every suite of the
# property test is its own ctest test, so they run in parallel and time out
# alone. Ranks are threads over nexar_bootstrap_local.
set(NX_COLL_DIR ${CMAKE_CURRENT_LIST_DIR})

add_executable(coll_algo_test ${NX_COLL_DIR}/coll_algo_test.c)
target_link_libraries(coll_algo_test PRIVATE nexar_internal)
add_test(NAME collective.algo COMMAND coll_algo_test)
set_tests_properties(collective.algo PROPERTIES TIMEOUT 30 LABELS "unit;collective")

add_executable(coll_prop_test ${NX_COLL_DIR}/coll_prop_test.c ${NX_COLL_DIR}/coll_util.c)
target_include_directories(coll_prop_test PRIVATE ${NX_COLL_DIR})
target_link_libraries(coll_prop_test PRIVATE nexar_internal)
foreach(suite basic algos dtypes nb barrier split errors bitident large4)
  add_test(NAME collective.${suite} COMMAND coll_prop_test ${suite})
  set_tests_properties(collective.${suite} PROPERTIES TIMEOUT 120 LABELS "collective")
endforeach()
add_test(NAME collective.large8 COMMAND coll_prop_test large8)
# Collectives whose large messages take the TCP bulk stream (see
# integration.p2p.bulk_tls): the non-blocking suite and the 2,097,153-float case.
foreach(suite nb large4)
  add_test(NAME collective.bulk_${suite} COMMAND coll_prop_test ${suite})
  set_tests_properties(collective.bulk_${suite} PROPERTIES TIMEOUT 120 LABELS "collective;bulk"
                       ENVIRONMENT "NEXAR_BULK_TCP_LOCAL=1;NEXAR_BULK_MIN_BYTES=0")
endforeach()
set_tests_properties(collective.large8 PROPERTIES TIMEOUT 600 LABELS "large")
# 4,000 non-blocking allreduces in flight at once: no thread each.
add_executable(coll_many_nb_test ${NX_COLL_DIR}/coll_many_nb_test.c ${NX_COLL_DIR}/coll_util.c)
target_include_directories(coll_many_nb_test PRIVATE ${NX_COLL_DIR})
target_link_libraries(coll_many_nb_test PRIVATE nexar_internal)
add_test(NAME collective.many_nb COMMAND coll_many_nb_test)
set_tests_properties(collective.many_nb PROPERTIES TIMEOUT 300 LABELS "collective")
# Every collective's schedule over a simulated network in one thread.
add_executable(sched_sim_test ${NX_COLL_DIR}/sched_sim_test.c ${NX_COLL_DIR}/coll_util.c)
target_include_directories(sched_sim_test PRIVATE ${NX_COLL_DIR})
target_link_libraries(sched_sim_test PRIVATE nexar_internal)
add_test(NAME unit.sched_sim COMMAND sched_sim_test 3)
set_tests_properties(unit.sched_sim PROPERTIES TIMEOUT 900 LABELS "unit;collective")
# Issue 14's C API: avg/band/bor/bxor, the variable-count collectives, sendrecv.
add_executable(coll_v_test ${NX_COLL_DIR}/coll_v_test.c ${NX_COLL_DIR}/coll_util.c)
target_include_directories(coll_v_test PRIVATE ${NX_COLL_DIR})
target_link_libraries(coll_v_test PRIVATE nexar_internal)
foreach(suite ops v vnb verr vlarge sendrecv)
  add_test(NAME collective.v_${suite} COMMAND coll_v_test ${suite})
  set_tests_properties(collective.v_${suite} PROPERTIES TIMEOUT 120 LABELS "collective")
endforeach()
# Large, empty and mismatched blocks over the TCP bulk stream (as collective.bulk_nb).
foreach(suite vlarge vnb)
  add_test(NAME collective.v_bulk_${suite} COMMAND coll_v_test ${suite})
  set_tests_properties(collective.v_bulk_${suite} PROPERTIES TIMEOUT 120 LABELS "collective;bulk"
                       ENVIRONMENT "NEXAR_BULK_TCP_LOCAL=1;NEXAR_BULK_MIN_BYTES=0")
endforeach()
# The same checks with one process per rank.
add_test(NAME collective.v_processes
         COMMAND $<TARGET_FILE:nexar-run> -n 3 --timeout 100 -- $<TARGET_FILE:coll_v_test> proc)
set_tests_properties(collective.v_processes PROPERTIES TIMEOUT 120 LABELS "collective;integration"
                     ENVIRONMENT "NEXAR_COLLECTIVE_TIMEOUT_MS=10000;NEXAR_BARRIER_TIMEOUT_MS=10000")
