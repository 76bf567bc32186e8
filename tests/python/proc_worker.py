"""One rank of test_procs.py: joins through the environment
(NEXAR_SEED_ADDR, NEXAR_CLUSTER_TOKEN, NEXAR_WORLD_SIZE) and runs every
check of opscheck."""
import sys

import nexar
import opscheck

with nexar.init_from_env() as c:
    opscheck.check_all(c)
    print(f"rank {c.rank} of {c.world_size} ok", flush=True)
sys.exit(0)
