# BEGIN p2p-rpc
foreach(n 1 2 3 5 8)
  add_test(NAME integration.p2p.world${n} COMMAND p2p_test ${n})
  set_tests_properties(integration.p2p.world${n} PROPERTIES TIMEOUT 90 LABELS "integration")
endforeach()
add_test(NAME integration.p2p.processes
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/p2p_proc_test.sh
                 $<TARGET_FILE:nexar-run> $<TARGET_FILE:p2p_test>)
set_tests_properties(integration.p2p.processes PROPERTIES TIMEOUT 150 LABELS "integration")
add_test(NAME integration.rpc COMMAND rpc_test)
set_tests_properties(integration.rpc PROPERTIES TIMEOUT 90 LABELS "integration")
add_test(NAME integration.large COMMAND large_test)
set_tests_properties(integration.large PROPERTIES TIMEOUT 300 LABELS "large")
# END p2p-rpc
# BEGIN netns
# Three hosts in network namespaces (root only; skipped otherwise), once
# clean and once with 1% of UDP datagrams dropped by nft on one host.
add_test(NAME integration.netns COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/netns_test.sh
         $<TARGET_FILE:nexar-seed> $<TARGET_FILE:mesh_worker> 0)
add_test(NAME integration.netns_loss1 COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/netns_test.sh
         $<TARGET_FILE:nexar-seed> $<TARGET_FILE:mesh_worker> 1)
set_tests_properties(integration.netns integration.netns_loss1 PROPERTIES TIMEOUT 180
                     LABELS "integration;netns" SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
# END netns
# BEGIN impair
# The same multi-host worker over loopback with the transport's test-only
# impairment hook: 1% loss, 2 ms delay, 1% reordering, deterministic seed.
add_test(NAME integration.impaired
         COMMAND bash -c "$<TARGET_FILE:nexar-run> -n 3 --timeout 120 -- $<TARGET_FILE:mesh_worker>")
set_tests_properties(integration.impaired PROPERTIES TIMEOUT 150 LABELS "integration"
  ENVIRONMENT "NEXAR_TEST_IMPAIR=loss=1%,delay=2ms,jitter=1ms,reorder=1%,seed=7")
# END impair
# BEGIN tools
add_test(NAME integration.tools COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/tools_test.sh
         ${CMAKE_BINARY_DIR})
set_tests_properties(integration.tools PROPERTIES TIMEOUT 240 LABELS "integration")
# END tools
