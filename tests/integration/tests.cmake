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
