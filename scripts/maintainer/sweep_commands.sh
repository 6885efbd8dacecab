# The small-budget sweeps' two commands, defined once for reruns.sh (across sittings) and
# reproduce_results.sh (publication), so that both train the same runs. Sourced, not run.
#   listops_sweep <root> [<--resume-from file>]    prints the ListOps sweep's command line
#   mqar_sweep <root> [<--resume-from file>]       prints the MQAR sweep's command line
#   run_line "<command line>"                      runs a printed line, split on spaces only
# <root> holds the sweeps' runs (listops/, mqar/ under it; no spaces in paths, as run_line
# splits on them). The printed line is also what the published provenance records as the
# command that trained the runs. One run at a time on 2 threads, so each run's tokens/s and
# memory are its own.

# ListOps at 10 seeds: 5 against 5 cannot separate any of its 153 pairs (pairwise_tests.py).
listops_sweep() {
    local line="python scripts/seed_sweep.py --root $1/listops --jobs 1 --threads 2 ${2:+$2 }"
    echo "${line}trainer.max_steps=300 tags=[readme] --seeds 1 2 3 4 5 6 7 8 9 10 --more-seeds"
}

# MQAR at seeds 1-5, 6-10 where they split (the preset's seed rule).
mqar_sweep() {
    echo "python scripts/seed_sweep.py --preset mqar_cpu --root $1/mqar --jobs 1 --threads 2" \
        "${2:+$2 }tags=[readme]"
}

# Split on spaces only: "tags=[readme]" is an argument, never a file pattern.
run_line() {
    local -a words
    read -ra words <<< "$1"
    "${words[@]}"
}
