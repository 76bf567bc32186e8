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
# The inter-host bulk path (TCP + TLS, and plaintext) between ranks as
# threads: NEXAR_BULK_TCP_LOCAL treats them as separate hosts, and
# NEXAR_BULK_MIN_BYTES=0 sends everything past the eager size through it.
add_test(NAME integration.p2p.bulk_tls COMMAND p2p_test 3)
add_test(NAME integration.p2p.bulk_plain COMMAND p2p_test 3)
add_test(NAME integration.fault.bulk_tls COMMAND fault_test)
set_tests_properties(integration.p2p.bulk_tls integration.p2p.bulk_plain integration.fault.bulk_tls
                     PROPERTIES TIMEOUT 120 LABELS "integration;bulk"
                     ENVIRONMENT "NEXAR_BULK_TCP_LOCAL=1;NEXAR_BULK_MIN_BYTES=0")
set_tests_properties(integration.p2p.bulk_plain PROPERTIES ENVIRONMENT
                     "NEXAR_BULK_TCP_LOCAL=1;NEXAR_BULK_MIN_BYTES=0;NEXAR_ENCRYPT_BULK=0")
# END p2p-rpc
# BEGIN netns
# Three hosts in network namespaces (root only; skipped otherwise), once
# clean and once with 1% of UDP datagrams dropped by nft on one host; the
# 8 MiB messages must take the TLS bulk TCP stream between hosts. Once more
# with encrypt_bulk=0: the plaintext stream. (Namespaces share one kernel, so
# the same-host probe would succeed: NEXAR_BULK_TCP_LOCAL makes them behave as
# separate machines.)
add_test(NAME integration.netns COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/netns_test.sh
         $<TARGET_FILE:nexar-seed> $<TARGET_FILE:mesh_worker> 0)
add_test(NAME integration.netns_loss1 COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/netns_test.sh
         $<TARGET_FILE:nexar-seed> $<TARGET_FILE:mesh_worker> 1)
add_test(NAME integration.netns_plain COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/netns_test.sh
         $<TARGET_FILE:nexar-seed> $<TARGET_FILE:mesh_worker> 0)
set_tests_properties(integration.netns integration.netns_loss1 integration.netns_plain
                     PROPERTIES TIMEOUT 180 LABELS "integration;netns" SKIP_RETURN_CODE 77
                     RUN_SERIAL TRUE ENVIRONMENT "MESH_WANT_BULK=2;NEXAR_BULK_TCP_LOCAL=1")
set_tests_properties(integration.netns_plain PROPERTIES
                     ENVIRONMENT "MESH_WANT_BULK=1;NEXAR_ENCRYPT_BULK=0;NEXAR_BULK_TCP_LOCAL=1")
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
# BEGIN faults
# Failure detection, nexar_abort and resource hygiene, black box from the API.
# Ranks as threads: abort from a watchdog thread, abort seen by the peers,
# failed_ranks/on_failure in a split child's numbering, later calls fail fast.
add_test(NAME integration.fault COMMAND fault_test)
set_tests_properties(integration.fault PROPERTIES TIMEOUT 120 LABELS "integration")
# Elastic membership, ranks as threads through an in-process seed: grow 2 -> 4
# by joiners, shrink by a leave, elastic_max_world 3 admits one of two.
add_test(NAME integration.sparse_local COMMAND sparse_local_test)
set_tests_properties(integration.sparse_local PROPERTIES TIMEOUT 120 LABELS "integration")
add_test(NAME integration.elastic_local COMMAND elastic_local_test)
set_tests_properties(integration.elastic_local PROPERTIES TIMEOUT 120 LABELS "integration")
# A revoke landing while rank 1 starts a barrier or a receive still ends it
# (ABORTED or PEER_LOST, never TIMEOUT); 5000 rounds across the window.
add_test(NAME integration.revoke_race COMMAND revoke_race_test)
set_tests_properties(integration.revoke_race PROPERTIES TIMEOUT 180 LABELS "integration")
# 100 local clusters and 20 seeds created and deleted: no thread, fd or heap left.
add_test(NAME integration.hygiene COMMAND hygiene_test 100 10)
set_tests_properties(integration.hygiene PROPERTIES TIMEOUT 120 LABELS "integration")
# Processes: SIGKILL/SIGSTOP one rank before or during allreduce, barrier,
# broadcast and point-to-point; survivors get PEER_LOST within the heartbeat bound.
add_test(NAME integration.fault_processes
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/fault_proc_test.sh
                 $<TARGET_FILE:nexar-seed> $<TARGET_FILE:fault_worker>)
set_tests_properties(integration.fault_processes PROPERTIES TIMEOUT 150 LABELS "integration")
# Three network namespaces; one host's link is set down mid-run.
add_test(NAME integration.netns_fault
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/netns_fault_test.sh
                 $<TARGET_FILE:nexar-seed> $<TARGET_FILE:fault_worker>)
set_tests_properties(integration.netns_fault PROPERTIES TIMEOUT 90
                     LABELS "integration;netns" SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
# Bounded chaos soak (60 s of rounds): nft loss + NEXAR_TEST_IMPAIR on three hosts.
add_test(NAME integration.chaos
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/chaos_test.sh
                 $<TARGET_FILE:nexar-seed> $<TARGET_FILE:chaos_worker> 60)
set_tests_properties(integration.chaos PROPERTIES TIMEOUT 200 LABELS "chaos"
                     SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
# END faults
# BEGIN perf
# nexar-perf smoke runs: ranks as threads, and as processes through its own seed.
add_test(NAME integration.perf.threads
         COMMAND nexar-perf all_reduce -n 2 -b 8 -e 64K -i 3 -w 1)
add_test(NAME integration.perf.procs
         COMMAND nexar-perf all_gather --procs -n 3 -b 8 -e 64K -f 8 -i 3 -w 1)
set_tests_properties(integration.perf.threads integration.perf.procs PROPERTIES TIMEOUT 120
                     LABELS "integration")
# END perf
# BEGIN membership
add_test(NAME integration.membership COMMAND membership_test)
set_tests_properties(integration.membership PROPERTIES TIMEOUT 120 LABELS "integration")
# END membership
# BEGIN torchrun
add_test(NAME integration.torchrun COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/torchrun_test.sh
         $<TARGET_FILE:mesh_worker>)
set_tests_properties(integration.torchrun PROPERTIES TIMEOUT 120 LABELS "integration")
# END torchrun
# BEGIN ipv6
# Worlds over IPv6. Threads over ::1 (bootstrap_local with NEXAR_BIND_ADDR=[::1]:0):
# every peer reached at an IPv6 address, point-to-point and allreduce up to
# 8 MiB; again with the TCP bulk path (TLS), and on the dual-stack [::]; the
# whole p2p suite over ::1. Processes: nexar-run --listen [::1]:0, nexar-seed
# at [::1], torchrun variables with MASTER_ADDR=::1, a dual-stack worker in an
# IPv4 world, bare IPv6 addresses refused. Skipped (77) without IPv6 loopback.
add_test(NAME integration.ipv6.threads COMMAND ipv6_test 3)
add_test(NAME integration.ipv6.bulk_tls COMMAND ipv6_test 3)
add_test(NAME integration.ipv6.dual_stack COMMAND ipv6_test 3)
add_test(NAME integration.ipv6.p2p_world3 COMMAND p2p_test 3)
add_test(NAME integration.ipv6.processes
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/ipv6_proc_test.sh ${CMAKE_BINARY_DIR})
set_tests_properties(integration.ipv6.threads integration.ipv6.bulk_tls
                     integration.ipv6.dual_stack integration.ipv6.p2p_world3
                     integration.ipv6.processes
                     PROPERTIES TIMEOUT 120 LABELS "integration;ipv6" SKIP_RETURN_CODE 77
                     ENVIRONMENT "NEXAR_BIND_ADDR=[::1]:0")
set_tests_properties(integration.ipv6.bulk_tls PROPERTIES ENVIRONMENT
                     "NEXAR_BIND_ADDR=[::1]:0;NEXAR_BULK_TCP_LOCAL=1;IPV6_WANT_BULK=2")
set_tests_properties(integration.ipv6.dual_stack PROPERTIES ENVIRONMENT
                     "NEXAR_BIND_ADDR=[::]:0;NEXAR_BULK_TCP_LOCAL=1;IPV6_WANT_BULK=2")
set_tests_properties(integration.ipv6.processes PROPERTIES ENVIRONMENT "")
# Three network-namespace hosts with IPv6 addresses (fd00:6e78::1..3), the
# seed on the IPv6 one: the world forms over IPv6 and the 8 MiB messages take
# the TLS bulk TCP stream between hosts over IPv6.
add_test(NAME integration.netns_ipv6 COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/netns_test.sh
         $<TARGET_FILE:nexar-seed> $<TARGET_FILE:mesh_worker> 0 6)
set_tests_properties(integration.netns_ipv6 PROPERTIES TIMEOUT 180 LABELS "integration;netns"
                     SKIP_RETURN_CODE 77 RUN_SERIAL TRUE
                     ENVIRONMENT "MESH_WANT_BULK=2;NEXAR_BULK_TCP_LOCAL=1")
# END ipv6
# BEGIN seed-hardening
# The bulk listener under 3,000 connect-and-close from a stranger, and silent
# connections: descriptors back to the baseline, threads bounded.
add_test(NAME integration.bulk_churn COMMAND bulk_churn_test 3000)
set_tests_properties(integration.bulk_churn PROPERTIES TIMEOUT 120 LABELS "integration")
# Workers form despite 2,000 idle connections to the seed (processes).
add_test(NAME integration.seed_flood
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/seed_flood_test.sh
                 $<TARGET_FILE:nexar-seed> $<TARGET_FILE:seed_holder> $<TARGET_FILE:mesh_worker>)
set_tests_properties(integration.seed_flood PROPERTIES TIMEOUT 150 LABELS "integration")
# The same with room for every connection (ulimit -n 8192): before the fix the
# seed closed connections past 1,024 and workers failed with NEXAR_ERR_AUTH.
add_test(NAME integration.seed_flood_8k
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/seed_flood_test.sh
                 $<TARGET_FILE:nexar-seed> $<TARGET_FILE:seed_holder> $<TARGET_FILE:mesh_worker>)
set_tests_properties(integration.seed_flood_8k PROPERTIES TIMEOUT 150 LABELS "integration"
                     ENVIRONMENT "SEED_NOFILE=8192")
# A joiner SIGKILLed (or stopped, then killed) at 15 seeded random moments of
# formation: survivors succeed, or fail within 4 s of the kill, never TIMEOUT.
add_test(NAME integration.seed_kill
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/seed_kill_test.sh
                 $<TARGET_FILE:nexar-seed> $<TARGET_FILE:mesh_worker> 15 4242)
set_tests_properties(integration.seed_kill PROPERTIES TIMEOUT 240 LABELS "integration")
# END seed-hardening
# BEGIN flood
# The unexpected-data budget at 64 KiB messages (under the stream window):
# rank 0's peak RSS stays within the budget + 32 MiB while rank 1 floods it,
# allreduces still complete while the budget is full, and all messages arrive
# in order afterwards. Same host (past the eager queue, sends wait for their
# reader) and as separate hosts (QUIC flow control holds the sender).
add_test(NAME integration.flood
         COMMAND bash -c "$<TARGET_FILE:nexar-run> -n 3 --timeout 150 -- $<TARGET_FILE:flood_worker>")
add_test(NAME integration.flood_remote
         COMMAND bash -c "$<TARGET_FILE:nexar-run> -n 3 --timeout 150 -- $<TARGET_FILE:flood_worker>")
set_tests_properties(integration.flood integration.flood_remote PROPERTIES TIMEOUT 180
  LABELS "integration"
  ENVIRONMENT "NEXAR_UNEXPECTED_BUDGET_BYTES=67108864;NEXAR_COLLECTIVE_TIMEOUT_MS=60000")
set_tests_properties(integration.flood_remote PROPERTIES ENVIRONMENT
  "NEXAR_UNEXPECTED_BUDGET_BYTES=67108864;NEXAR_COLLECTIVE_TIMEOUT_MS=60000;NEXAR_BULK_TCP_LOCAL=1")
# END flood
# BEGIN admission
# Floods of valid QUIC Initials from a non-member (127.0.0.1): the world keeps
# >= 90% of its unattacked rate and forms in its normal time.
add_test(NAME integration.admission
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/hs_attack_test.sh
                 $<TARGET_FILE:nexar-run> $<TARGET_FILE:hs_worker> $<TARGET_FILE:initial_flood>)
# "timing": a rate comparison, left out of the sanitizer passes (they distort rates)
set_tests_properties(integration.admission PROPERTIES TIMEOUT 240 LABELS "integration;timing"
                     RUN_SERIAL TRUE)
# END admission
# Recovery by agreement (ULFM-like): one rank per network namespace; kills,
# silent and asymmetric cuts, a dying coordinator, cascades, partitions, a soak.
add_test(NAME integration.recover
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/recover_test.sh
                 $<TARGET_FILE:nexar-seed> $<TARGET_FILE:recover_worker>)
set_tests_properties(integration.recover PROPERTIES TIMEOUT 480
                     LABELS "integration;netns" SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
# Elastic membership with processes across namespaces: grow 2 -> 4 with
# joiners on veth addresses, leave, a joiner dying before the commit, a member
# killed, the seed killed, a wrong token, --max-world, grow/shrink cycles.
add_test(NAME integration.elastic
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/elastic_test.sh
                 $<TARGET_FILE:nexar-seed> $<TARGET_FILE:elastic_worker>)
set_tests_properties(integration.elastic PROPERTIES TIMEOUT 300
                     LABELS "integration;netns" SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
# BEGIN launcher
# nexar_init_from_env under each real launcher, started by the test: a
# one-node Slurm cluster (srun -n 4; srun --mpi=pmix -n 4, skipped when
# Slurm's pmix plugin is absent), Open MPI's mpirun (PMIx), MPICH's mpiexec
# (PMI-1), torchrun with and without its agent store; refusals (missing
# token, inconsistent worlds, token file permissions). A launcher that is not
# installed fails (scripts/deps.sh installs them).
foreach(m slurm slurm_pmix mpirun mpiexec torchrun env)
  add_test(NAME launcher.${m} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/launcher_test.sh
           ${m} $<TARGET_FILE:launch_worker>)
  set_tests_properties(launcher.${m} PROPERTIES TIMEOUT 180 LABELS "launcher")
endforeach()
set_tests_properties(launcher.slurm launcher.slurm_pmix PROPERTIES SKIP_RETURN_CODE 77 # 77: not root (slurm), no pmix plugin
                     RESOURCE_LOCK slurm) # each starts its own slurmctld/slurmd/munged: never two at once
# END launcher
# BEGIN info
add_test(NAME integration.info COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/info_test.sh
         $<TARGET_FILE:nexar-info>)
set_tests_properties(integration.info PROPERTIES TIMEOUT 60 LABELS "integration")
# END info
# BEGIN elastic-tools
# The tools with elastic membership (processes on loopback, elastic_tool_worker as
# the workload): nexar-seed --max-world caps admissions, --once ends them;
# nexar-run --join starts ranks against a running nexar-seed (grow 2 -> 4).
add_test(NAME integration.elastic_tools.seed
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/elastic_tools_test.sh
                 $<TARGET_FILE:nexar-seed> $<TARGET_FILE:nexar-run> $<TARGET_FILE:elastic_tool_worker> seed)
add_test(NAME integration.elastic_tools.run
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/elastic_tools_test.sh
                 $<TARGET_FILE:nexar-seed> $<TARGET_FILE:nexar-run> $<TARGET_FILE:elastic_tool_worker> run)
set_tests_properties(integration.elastic_tools.seed integration.elastic_tools.run
                     PROPERTIES TIMEOUT 120 LABELS "integration")
# END elastic-tools
# BEGIN elastic-example
# examples/elastic_train against its --reference: fixed worlds under nexar-run
# (1, 3, 5 ranks for a batch of 3) and a leave give the reference checksum.
add_test(NAME integration.elastic_example.static
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/elastic_example_test.sh
                 $<TARGET_FILE:nexar-seed> $<TARGET_FILE:nexar-run>
                 $<TARGET_FILE:example_elastic_train> static)
set_tests_properties(integration.elastic_example.static PROPERTIES TIMEOUT 120 LABELS "integration")
# The elastic run: nexar-seed (world 2) and two nexar-run --join -n 2; the
# world grows 2 -> 4, a joiner leaves, the other is SIGKILLed and the two
# survivors recover; both finish with the reference checksum.
add_test(NAME integration.elastic_example
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/elastic_example_test.sh
                 $<TARGET_FILE:nexar-seed> $<TARGET_FILE:nexar-run>
                 $<TARGET_FILE:example_elastic_train> elastic)
set_tests_properties(integration.elastic_example PROPERTIES TIMEOUT 240 LABELS "integration")
# END elastic-example
# BEGIN sparse
# Sparse topologies with relay routing (API.md "Topologies"), one rank per
# network namespace; nft drops every packet between ranks that are not
# neighbours and any such packet fails the run (sparse_test.sh). fullmesh is
# the harness's self-check (the rules checked by probes, then a full mesh run
# under counting rules).
target_compile_definitions(sparse_worker PRIVATE SPARSE_HAVE_NEIGHBOR_STATS=1)
foreach(s fullmesh hypercube kregular kill_relay partition cut close)
  add_test(NAME integration.sparse.${s}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/sparse_test.sh
                   $<TARGET_FILE:nexar-seed> $<TARGET_FILE:sparse_worker> ${s})
  set_tests_properties(integration.sparse.${s} PROPERTIES TIMEOUT 180
                       LABELS "integration;netns" SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
endforeach()
# END sparse
# Same-host shared-memory rings (issue 15): order across sizes and paths,
# collectives, forged ring records (integration/shm_test.c).
# Nine ranks as threads under ThreadSanitizer take about 60 s alone on two
# cores and twice that beside another test (CI runs two at once): a
# sanitizer build gives these three times the time.
set(nx_shm_timeout 120)
if(NEXAR_TSAN OR NEXAR_ASAN)
  set(nx_shm_timeout 360)
endif()
foreach(args "2;1" "3;0" "6;-1" "9;-1")
  list(GET args 0 w)
  list(GET args 1 forge)
  add_test(NAME integration.shm.world${w} COMMAND shm_test ${w} ${forge})
  set_tests_properties(integration.shm.world${w} PROPERTIES TIMEOUT ${nx_shm_timeout}
                       LABELS "integration")
endforeach()
# The rings between processes: order and collectives (4 ranks), a writer
# SIGKILLed mid-write (PEER_LOST in bound), a third process forging records
# into a live segment (PROTOCOL, counted; integration/shm_proc_test.sh).
add_test(NAME integration.shm.procs
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/shm_proc_test.sh
                 $<TARGET_FILE:nexar-seed> $<TARGET_FILE:shm_worker> $<TARGET_FILE:shm_forger>)
set_tests_properties(integration.shm.procs PROPERTIES TIMEOUT 120 LABELS "integration")
# The lane under one-datagram queues (its own network namespace): refused
# control datagrams are kept and sent again (integration/shm_qlen_test.sh).
add_test(NAME integration.shm.qlen1
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/shm_qlen_test.sh
                 $<TARGET_FILE:shm_test>)
set_tests_properties(integration.shm.qlen1 PROPERTIES TIMEOUT 120 LABELS "integration;netns"
                     SKIP_RETURN_CODE 77)
