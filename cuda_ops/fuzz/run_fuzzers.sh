#!/usr/bin/env bash
# Runs libFuzzer targets built by `make fuzz-build` for SECONDS each, one after another:
#   run_fuzzers.sh SECONDS target...
# Each starts from its committed seeds (cuda_ops/fuzz/corpus/<target>/, only read) and the inputs
# found before (build/fuzz/corpus/<target>/, where new ones go). A crash, leak, UB or timeout
# leaves its input in cuda_ops/fuzz/findings/ (git-ignored) and fails the run.
# FUZZ_CORPUS_ONLY=1 replays the seeds only (no new inputs); FUZZ_CORPUS_ONLY_TARGETS="a b" does so
# for those targets, e.g. while a bug the fuzzer finds in seconds is being fixed.
# FUZZ_KEEP_GOING=1 goes on after a finding (libFuzzer's fork mode), for long unattended runs.
set -uo pipefail
seconds=${1:?usage: run_fuzzers.sh SECONDS target...}
shift
root=$(cd "$(dirname "$0")/../.." && pwd)
status=0
mkdir -p "$root/cuda_ops/fuzz/findings"
for target in "$@"; do
  binary="$root/build/fuzz/fuzz_$target"
  seeds="$root/cuda_ops/fuzz/corpus/$target"
  found="$root/build/fuzz/corpus/$target"
  log="$root/build/fuzz/fuzz_$target-${seconds}s.log"  # a long run and a smoke keep separate logs
  mkdir -p "$found"
  # UB reports abort (halt_on_error); leaks are checked at the end of each input.
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0
  if [[ ${FUZZ_CORPUS_ONLY:-0} == 1 || " ${FUZZ_CORPUS_ONLY_TARGETS:-} " == *" $target "* ]]; then
    echo "fuzz_$target: replaying the seeds only"
    args=(-runs=0 "$seeds")
  else
    args=(-max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 "$found" "$seeds")
  fi
  if [[ ${FUZZ_KEEP_GOING:-0} == 1 ]]; then
    args=(-fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1 "${args[@]}")
  fi
  if "$binary" -artifact_prefix="$root/cuda_ops/fuzz/findings/$target-" "${args[@]}" >"$log" 2>&1; then
    echo "fuzz_$target: $(grep -m1 -o 'Done [0-9]* runs in [0-9]* second(s)' "$log" || echo ok) (log: $log)"
  else
    echo "fuzz_$target FAILED (log: $log):" >&2
    grep -E 'ERROR|SUMMARY|runtime error|#[0-9]+ 0x|Test unit written' "$log" | head -25 >&2
    status=1
  fi
done
exit $status
