#!/usr/bin/env bash
# One device lease, in steps that each fit one call of the device tool (book/reproduce.md §5).
#
#   scripts/lease.sh receive                      copy what this call carried: bundle parts to
#                                                 /tmp/b, compile-cache parts to /tmp/vc,
#                                                 .train-carry/ to /tmp/t, the parts of a
#                                                 recorded training (.train-out/LEASE/) to
#                                                 /tmp/t/recorded
#   scripts/lease.sh measure COMMIT SECONDS PROFILE [--panel start|end] EXPERIMENT...
#                                                 unpack once, then run the experiments in
#                                                 order until SECONDS have passed (or until
#                                                 $LEASE_DEADLINE, epoch, less 40 s); results,
#                                                 log and the lease record go to $OUT.
#                                                 --panel start: the profile's control panel
#                                                 joins the first experiment (its engines
#                                                 first); --panel end: the panel after the
#                                                 experiments (none: the panel alone). Rows
#                                                 carry the lease id $SPECDEC_LEASE;
#                                                 $LEASE_CELLS (globs) keeps only the cells
#                                                 that match, e.g. 'baseline-v1-*';
#                                                 LEASE_FORCE=1 measures them again even where
#                                                 stored rows measured the same weights (the
#                                                 pinned twin of a runner control, in its lease).
#   scripts/lease.sh bg END STAGE [STAGE...]      one measuring run across several calls: each
#                                                 STAGE ("SECONDS PROFILE [--panel P] EXP...",
#                                                 $LEASE_CELLS as "CELLS=globs;" before it) is a
#                                                 `measure`, run one after another in the
#                                                 background from a copy of the tree, every stage
#                                                 but the last ending by END (epoch) less 330 s
#                                                 (an end panel's time), the last by END. The
#                                                 call returns at once; no call boundary cuts an
#                                                 engine or wastes the budget between calls.
#   scripts/lease.sh wait SECONDS                 follow the background run for up to SECONDS,
#                                                 then return its log's tail; once it has ended,
#                                                 its results, panels and logs to $OUT.
#   scripts/lease.sh cache [N]                    vLLM's compile cache in 15 MB parts, 4 per call:
#                                                 parts 4N..4N+3 to $OUT
#   scripts/lease.sh train receive                the same as receive
#   scripts/lease.sh train data                   target from the carried GGUF, its greedy
#                                                 continuations of the prompts (vLLM), or the
#                                                 carried sequences.npz of an earlier lease
#   scripts/lease.sh train fit SECONDS [--only A]...  train each artifact to its plateau, none
#                                                 past SECONDS, pack with the learning-curve
#                                                 checkpoints, first 4 parts + index + logs to $OUT
#   scripts/lease.sh train state N                the states a cap left (a run to go on with in
#                                                 a later lease): parts 4N..4N+3 + states.json
#                                                 to $OUT (the fit names how many N)
#   scripts/lease.sh train bg STEP [ARGS...]      a train step longer than a call (data of 20480
#                                                 prompts, fit to a plateau) in the background,
#                                                 from a copy of the tree; follow it with `wait`;
#                                                 with THEN="SECONDS PROFILE EXP..." (and COMMIT,
#                                                 THEN_END, DRY_RUN) then `train install` and
#                                                 `measure` in the same run
#   scripts/lease.sh train bench [--only A]...    where each artifact's training step goes (after
#                                                 `train data`; ~20 s each): bench.json to $OUT;
#                                                 --profile: its operators too (profile-A.txt)
#   scripts/lease.sh train pack [--only A]...     the trained artifacts' weights in 15 MB parts,
#                                                 first 4 parts + index to $OUT
#   scripts/lease.sh train out N                  parts 4N..4N+3 (+ index) to $OUT
#   scripts/lease.sh train install [PARTS]        the trained artifacts (what this lease trained, or
#                                                 the packed parts in PARTS, e.g. /tmp/t/recorded),
#                                                 the target and the text sources where
#                                                 h200-trained (h200-plateau) finds them; then
#                                                 `measure COMMIT SECONDS h200-trained ...`
#
# An EXPERIMENT written peer:NAME runs vLLM's own `bench latency` on NAME's cells (specdec.peer);
# A+B runs experiments A and B in one `specdec run` (their engines in one queue).
# COMMIT is the committed, clean commit of the working tree that travelled (a copy has no
# .git): the rows are stamped with it. Experiments run in the order given, each with what is
# left of the budget, so the most important come first and the rest stay pending.
set -uo pipefail
step=${1:?step}; shift
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# One specdec cache (converted models, engine logs) for every tree a lease runs from, each
# call's copy and the background run's /tmp/tree alike: a target that `train install` put there
# is found by a `measure` in a later call (lease 37's failed where the cache was per tree).
export SPECDEC_CACHE=${SPECDEC_CACHE:-/tmp/specdec-cache}
stamp() { date -u +%Y-%m-%dT%H:%M:%SZ; }
# A `measure` keeps DEADLINE_MARGIN seconds before LEASE_DEADLINE and starts an experiment only
# with MEASURE_MIN seconds left; a fit followed by THEN must leave both and the install
# (~30 s) before THEN_END: THEN_ROOM (`train bg`).
DEADLINE_MARGIN=40
MEASURE_MIN=150
THEN_ROOM=$(( 30 + MEASURE_MIN + DEADLINE_MARGIN ))
# A background run (`bg`, `train bg`): the device machine stays warm between calls (a call
# within 30 s of the last), and what a call starts in the background keeps running. It runs
# from a copy of the tree (the next call's copy replaces this one) and writes to /tmp/bgout;
# `wait` follows it.
bg_tree() {
  [ -e /tmp/bg.pid ] && kill -0 "$(cat /tmp/bg.pid)" 2>/dev/null && { echo "a background run is going"; exit 1; }
  rm -rf /tmp/tree /tmp/bgout && mkdir -p /tmp/bgout /tmp/tree \
    && tar cf - --exclude=./.venv --exclude=./.bundle --exclude=./.git . | tar xf - -C /tmp/tree
}
bg_start() {  # the script /tmp/bg.sh, written after bg_tree
  cat /tmp/bg.sh
  setsid nohup bash /tmp/bg.sh > /tmp/bg.log 2>&1 < /dev/null &
  echo $! > /tmp/bg.pid
}

# What this lease has landed so far, into $1: the cells measured in it (only those: earlier
# leases' cells were dated back), its control panels (data/panels/<lease>-<phase>/<profile>/),
# vLLM's own log of every engine (what an engine start spent its time on) and the logs. Every
# Parquet file is whole (written to a temporary name, then renamed), so a snapshot taken while
# a run goes on merges like a finished one. The status is the rows' (a `&&` chain must know).
pack_out() {
  [ -d /tmp/results ] || return 1
  (cd /tmp/results && find . \( -name '*.parquet' -o -name '*.peer.json' \) -newer /tmp/lease-start -print0 \
     | tar czf "$1/results.tgz" --null -T -) || return 1
  [ -d /tmp/panels ] && tar czf "$1/panels.tgz" -C /tmp panels
  local ld=$SPECDEC_CACHE/logs  # specdec.paths.CACHE_DIR/logs
  [ -d "$ld" ] && tar czf "$1/engine-logs.tgz" -C "$ld" .
  cp /tmp/run.log /tmp/lease.log "$1/" 2>/dev/null
  return 0
}

case "$step" in
receive)
  mkdir -p /tmp/b
  # Parts may come over several calls (a call carries at most 64 MiB with the tree).
  cp -v .bundle/specdec-bundle.tar.xz.* .bundle/manifest.json /tmp/b/ 2>/dev/null
  mkdir -p /tmp/vc && cp -v .vllm-cache/vllm-cache.tgz.* /tmp/vc/ 2>/dev/null
  mkdir -p /tmp/t/recorded && cp -v .train-carry/* /tmp/t/ 2>/dev/null
  # a recorded training's parts (train-out.tgz.NNN + index), to install beside a new one
  cp -v .train-out/*/train-out.* /tmp/t/recorded/ 2>/dev/null
  ls -la /tmp/b /tmp/vc /tmp/t /tmp/t/recorded
  # what the plan's calls have not brought to this machine yet (all of it, on a fresh machine
  # that replaced one taken back mid-lease: lease 28): repeat the calls that carry those files
  PYTHONPATH=lib python3 -c 'from specdec import carry; print("still to carry:", " ".join(carry.still_to_carry()) or "nothing")'
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  # which physical GPU (hence host) this lease runs on: the rows carry the same UUID
  echo "receive $(stamp) $(nvidia-smi --query-gpu=uuid,pci.bus_id --format=csv,noheader | head -1)" >> /tmp/lease.log
  tail -1 /tmp/lease.log
  ;;
measure)
  commit=${1:?commit}; seconds=${2:?seconds}; profile=${3:?profile}; shift 3
  panel=""
  if [ "${1:-}" = "--panel" ]; then panel=${2:?panel phase}; shift 2; fi
  t0=$(date +%s)
  # LEASE_DEADLINE (epoch seconds, set where the calls are written: send time + the session's
  # device time) caps the budget, so a call queued behind a slow step ends, and returns its
  # rows, before the lease does: a call cut by the lease's end returns nothing.
  if [ -n "${LEASE_DEADLINE:-}" ] && [ $(( LEASE_DEADLINE - t0 - DEADLINE_MARGIN )) -lt "$seconds" ]; then
    seconds=$(( LEASE_DEADLINE - t0 - DEADLINE_MARGIN ))
    echo "budget capped to ${seconds}s by LEASE_DEADLINE"
  fi
  if [ ! -s /tmp/env.sh ]; then
    # The host's python has no pydantic or yaml: unpack through specdec.bundle alone,
    # which needs only the standard library (tests/test_bundle.py checks that).
    PYTHONPATH=lib python3 -c 'from specdec import bundle
print(bundle.shell_env(bundle.unpack("/tmp/b", "/tmp/site"), "/tmp/site", None))' > /tmp/env.sh \
      || { echo "unpack failed"; rm -f /tmp/env.sh; exit 1; }
    echo "unpacked in $(( $(date +%s) - t0 ))s"
  fi
  if [ ! -d ~/.cache/vllm ] && ls /tmp/vc/vllm-cache.tgz.* >/dev/null 2>&1; then
    mkdir -p ~/.cache && cat /tmp/vc/vllm-cache.tgz.* | tar xzf - -C ~/.cache \
      && echo "compile cache restored" || echo "compile cache incomplete: starting cold"
  fi
  . /tmp/env.sh
  # The travelled lib/ first: the bundle's copy of the study code must not shadow it.
  export PYTHONPATH=$PWD/lib:${PYTHONPATH:-} SPECDEC_COMMIT=$commit SPECDEC_DIRTY=0 \
         VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
  # After `train install`: the carried text sources (as packages) and the trained artifacts.
  [ -d /tmp/t/pkgs ] && export PYTHONPATH=${PYTHONPATH:-}:/tmp/t/pkgs \
    SPECDEC_TRAINED_DIR=/tmp/trained SPECDEC_TRAINED_RECORDS=/tmp/trained/_records
  # Cells landed by earlier leases are done: start from them so the runner skips them (but
  # not a cell whose rows measured other trained weights than those installed: runner.plan).
  # Each profile is copied once, by the first call that names it, and dated back so that
  # only what this lease measures is newer than /tmp/lease-start and goes back.
  [ -e /tmp/lease-start ] || { touch /tmp/lease-start; mkdir -p /tmp/results; }
  if [ -d "data/results/$profile" ] && [ ! -d "/tmp/results/$profile" ]; then
    cp -r "data/results/$profile" /tmp/results/ \
      && find "/tmp/results/$profile" -exec touch -d 2000-01-01 {} +
  fi
  echo "measure-start $(stamp) $profile $*" >> /tmp/lease.log
  # How fast each vCPU runs the CPU probe, nothing else of ours running (issue 19): at each
  # control panel, beside it in panels.tgz.
  survey() { mkdir -p "/tmp/panels/${SPECDEC_LEASE:-lease}-$1" \
    && python3 -m specdec.worker vcpu-survey > "/tmp/panels/${SPECDEC_LEASE:-lease}-$1/vcpus.json" \
    && echo "vCPU survey ($1) written"; }
  [ "$panel" = start ] && survey start
  first_panel=""; [ "$panel" = start ] && first_panel="--panel start"
  cellargs=""; for c in ${LEASE_CELLS:-}; do cellargs="$cellargs --cell $c"; done
  [ -n "${LEASE_FORCE:-}" ] && cellargs="$cellargs --force"
  set -f  # the globs of LEASE_CELLS go to specdec as they are
  for exp in "$@"; do
    left=$(( seconds - ($(date +%s) - t0) ))
    [ "$left" -lt "$MEASURE_MIN" ] && { echo "budget spent: $exp not started"; break; }
    if [ "${exp#peer:}" != "$exp" ]; then
      # peer:EXPERIMENT = vLLM's own `bench latency` mirroring that experiment's cells.
      python3 -m specdec.cli peer run "$profile" -e "${exp#peer:}" --results-root /tmp/results \
        --budget "$left" 2>&1 | tee -a /tmp/run.log
      continue
    fi
    # A+B: one run of both (a profile with concurrent engines starts B's while A's finish)
    eargs=""; for e in ${exp//+/ }; do eargs="$eargs -e $e"; done
    python3 -m specdec.cli run "$profile" $eargs $first_panel $cellargs --results-root /tmp/results \
      --budget "$left" 2>&1 | grep --line-buffered -v "it/s\]$" | tee -a /tmp/run.log
    first_panel=""
  done
  if [ "$panel" = end ] || { [ "$panel" = start ] && [ $# -eq 0 ]; }; then
    [ "$panel" = end ] && survey end
    left=$(( seconds - ($(date +%s) - t0) ))
    python3 -m specdec.cli run "$profile" --panel "$panel" --results-root /tmp/results \
      --budget "$left" 2>&1 | grep --line-buffered -v "it/s\]$" | tee -a /tmp/run.log
  fi
  set +f
  echo "measure-end $(stamp)" >> /tmp/lease.log
  python3 -m specdec.cli status "$profile" --results-root /tmp/results 2>/dev/null | tee -a /tmp/run.log
  pack_out "$OUT"
  rc=$?
  ls -la "$OUT"
  # the rows went back or did not: a chain behind this call (`&&`) must know which
  exit "$rc"
  ;;
bg)
  # One measuring run across calls wastes nothing at their boundaries (bg_tree, bg_start).
  end=${1:?end epoch}; shift
  bg_tree
  script=/tmp/bg.sh; echo "set -u; cd /tmp/tree; export OUT=/tmp/bgout" > "$script"
  n=$#; i=0
  for stage in "$@"; do
    i=$((i + 1)); deadline=$end; [ "$i" -lt "$n" ] && deadline=$((end - 330))
    cells=""; case "$stage" in CELLS=*) cells=${stage%%;*}; cells=${cells#CELLS=}; stage=${stage#*;} ;; esac
    echo "echo \"stage $i/$n: \$(date -u +%H:%M:%S) $stage\"" >> "$script"
    echo "LEASE_CELLS='$cells' LEASE_DEADLINE=$deadline bash scripts/lease.sh measure ${COMMIT:?COMMIT} $stage" >> "$script"
  done
  echo 'echo "bg-end $(date -u +%H:%M:%S)"; touch /tmp/bgout/.done' >> "$script"
  bg_start
  echo "background run started: pid $(cat /tmp/bg.pid), ends by $(date -u -d @"$end" +%H:%M:%S)"
  ;;
wait)
  limit=${1:-240}; t0=$(date +%s)  # short: a machine lost mid-call returns nothing (lease 21)
  while [ ! -e /tmp/bgout/.done ] && [ $(( $(date +%s) - t0 )) -lt "$limit" ]; do
    kill -0 "$(cat /tmp/bg.pid 2>/dev/null)" 2>/dev/null || break
    sleep 5
  done
  grep -v "it/s\]$" /tmp/bg.log | tail -c 9000
  if [ -e /tmp/bgout/.done ] || ! kill -0 "$(cat /tmp/bg.pid 2>/dev/null)" 2>/dev/null; then
    cp /tmp/bgout/* "$OUT/" 2>/dev/null; cp /tmp/bg.log "$OUT/" 2>/dev/null
    echo "background run over"; ls -la "$OUT"
  else
    # The machine goes back when the session is idle for 30 s (a stalled client loses it):
    # every wait returns what has landed so far, so a lost machine costs only what came
    # after the last wait (lease 13 lost 20 minutes of rows this way).
    cp /tmp/bgout/fit.json /tmp/bgout/records.tgz "$OUT/" 2>/dev/null  # a training before it
    pack_out "$OUT" && cp /tmp/bg.log "$OUT/" 2>/dev/null \
      && echo "so far: $(tar tzf "$OUT/results.tgz" | grep -c 'runs.parquet$') cell(s) in results.tgz"
    echo "background run still going"
  fi
  ;;
cache)
  # A call returns at most about 64 MiB, so 4 parts of 15 MB per call: `cache N` returns parts
  # 4N..4N+3 of one archive, made by the first cache call of the lease (call it last).
  n=${1:-0}
  if [ ! -e /tmp/vcs/complete ]; then
    mkdir -p /tmp/vcs && rm -f /tmp/vcs/vllm-cache.tgz.* \
      && tar czf - -C ~/.cache vllm | split -b 15000000 -d - /tmp/vcs/vllm-cache.tgz. \
      && touch /tmp/vcs/complete
  fi
  for i in 0 1 2 3; do
    f=$(printf '/tmp/vcs/vllm-cache.tgz.%02d' $((4 * n + i))); [ -e "$f" ] && cp "$f" "$OUT/"
  done
  parts=$(ls /tmp/vcs/vllm-cache.tgz.* | wc -l)
  echo "compile cache: $parts parts in all; this call returns parts $((4 * n))..$((4 * n + 3))" \
    "(next: cache $((n + 1)) while $((4 * n + 4)) < $parts)"
  cp /tmp/lease.log "$OUT/" 2>/dev/null
  ls -la "$OUT"
  ;;
train)
  # Issue 10: data and training of the heads and drafts (book/reproduce.md, "Training heads
  # and drafts on a lease"); lib/specdec/training/device.py does the work.
  sub=${1:?train step: receive, data, fit, out, install or bg}; shift
  [ "$sub" = receive ] && exec "$0" receive
  if [ "$sub" = bg ]; then
    # As `bg` for measuring (bg_tree, bg_start); `scripts/lease.sh wait SECONDS` follows it
    # and, once it has ended, returns its $OUT (parts, index, logs).
    # THEN="SECONDS PROFILE EXP..." (with COMMIT, THEN_END epoch and DRY_RUN): once the step
    # has ended well, install what it trained and measure it, in the same background run (no
    # call boundary between training and measuring; lease 25 lost minutes there).
    then=""
    # A fit's cap must leave THEN its measure: THEN_ROOM (above). Lease
    # 2026-12-08-h100-50 left 130 s: the fit ran to its cap, and the measure found 96 s and
    # started nothing (the weights went with the machine). Refused here, before any device work.
    if [ -n "${THEN:-}" ] && [ "${1:-}" = fit ]; then
      room=$(( ${THEN_END:?THEN_END} - $(date +%s) - ${2:?fit SECONDS} ))
      if [ "$room" -lt "$THEN_ROOM" ]; then
        echo "train bg fit $2: the cap leaves THEN ${room}s before THEN_END, it needs $THEN_ROOM (install ~30, a measure's $MEASURE_MIN, the deadline's $DEADLINE_MARGIN): a cap of at most $(( $2 + room - THEN_ROOM ))s"
        exit 2
      fi
    fi
    [ -n "${THEN:-}" ] && then="&& bash scripts/lease.sh train install && LEASE_DEADLINE=${THEN_END:?THEN_END} bash scripts/lease.sh measure ${COMMIT:?COMMIT} $THEN"
    bg_tree
    printf 'cd /tmp/tree; export OUT=/tmp/bgout; bash scripts/lease.sh train %s %s; echo "bg-end rc=$? $(date -u +%%H:%%M:%%S)"; touch /tmp/bgout/.done\n' "$*" "$then" > /tmp/bg.sh
    bg_start
    echo "background train $* started: pid $(cat /tmp/bg.pid)"
    exit 0
  fi
  t0=$(date +%s)
  if [ ! -s /tmp/env.sh ]; then  # as in measure: the bundle unpacks with the standard library alone
    PYTHONPATH=lib python3 -c 'from specdec import bundle
print(bundle.shell_env(bundle.unpack("/tmp/b", "/tmp/site"), "/tmp/site", None))' > /tmp/env.sh \
      || { echo "unpack failed"; rm -f /tmp/env.sh; exit 1; }
    echo "unpacked in $(( $(date +%s) - t0 ))s"
  fi
  . /tmp/env.sh
  if [ ! -d /tmp/t/site ] && ls /tmp/t/gguf-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/t/site /tmp/t/gguf-*.whl
  fi
  export PYTHONPATH=$PWD/lib:/tmp/t/site:${PYTHONPATH:-} VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 \
         SPECDEC_TRAINED_DIR=/tmp/trained SPECDEC_TRAINED_RECORDS=/tmp/trained/_records
  echo "train-$sub-start $(stamp) $*" >> /tmp/lease.log
  # Further arguments go to the step (a dry run here: data --limit 3, fit 60 --max-steps 1).
  rc=0
  case "$sub" in
    # The data step hung at engine start twice (leases 4 and 5), inside the engine core right
    # after the parent had converted the target: a forked child inheriting a held lock is the
    # likely cause. So the conversion runs in its own process (device.target_in_child), the
    # engine core is spawned, not forked, and a hang costs 240 s, not the call: the step takes
    # ~100 s (conversion ~45 s, 2048 continuations ~56 s). One retry finds the target converted,
    # as the one data step that worked did. The limits grow by 45 s per 1000 prompts beyond the
    # first 2048 (20480 prompts: ~10 min of generation, 1070 s and 1130 s: `train bg data`).
    data) extra=$(( ( $(wc -l < /tmp/t/prompts.jsonl) - 2048 ) * 45 / 1000 )); [ "$extra" -lt 0 ] && extra=0
          ls /tmp/t/sequences.npz* >/dev/null 2>&1 && extra=0  # carried: no generation
          for limit in $(( 240 + extra )) $(( 300 + extra )); do
            VLLM_USE_V2_MODEL_RUNNER=0 VLLM_WORKER_MULTIPROC_METHOD=spawn \
              timeout -k 10 "$limit" python3 -m specdec.training.device data --out "$OUT" \
              --carry /tmp/t --work /tmp/train "$@" 2>&1 \
              | grep --line-buffered -v "it/s\]$" | tee -a /tmp/train.log; rc=${PIPESTATUS[0]}
            [ "$rc" -eq 0 ] && break
            echo "data: rc=$rc (124: no result in $limit s, hung?); engine cores killed" | tee -a /tmp/train.log
            pkill -9 -f EngineCore; sleep 2
          done ;;
    fit)  python3 -m specdec.training.device fit --work /tmp/train --out "$OUT" --seconds "${1:-420}" \
            "${@:2}" 2>&1 | tee -a /tmp/train.log; rc=${PIPESTATUS[0]} ;;
    bench) python3 -m specdec.training.device bench --work /tmp/train --out "$OUT" "$@" 2>&1 \
            | tee -a /tmp/train.log; rc=${PIPESTATUS[0]} ;;
    pack) python3 -m specdec.training.device pack --work /tmp/train --out "$OUT" "$@" 2>&1 \
            | tee -a /tmp/train.log; rc=${PIPESTATUS[0]} ;;
    out)  python3 -m specdec.training.device out "${1:?N}" --work /tmp/train --out "$OUT"; rc=$? ;;
    state) python3 -m specdec.training.device state "${1:?N}" --work /tmp/train --out "$OUT"; rc=$? ;;
    install)
          # Nothing of an earlier install may stay behind: a failed install must leave no
          # artifacts that the next measure would take for the ones named here.
          rm -rf /tmp/trained
          python3 -m specdec.training.device install --carry /tmp/t --work /tmp/train \
            ${1:+--parts "$1"} 2>&1 | tee -a /tmp/train.log
          rc=${PIPESTATUS[0]}
          [ "$rc" -eq 0 ] || { echo "install failed: nothing installed"; rm -rf /tmp/trained; exit 1; }
          # the dry run resolves every artifact and workload before an engine starts; DRY_RUN
          # names what this lease measures, e.g. "h200-plateau -e plateau-eagle3"
          PYTHONPATH=${PYTHONPATH:-}:/tmp/t/pkgs python3 -m specdec.cli run ${DRY_RUN:-h200-trained} --dry-run 2>&1 \
            | grep -v "^    " | tee -a /tmp/train.log ;;
    *) echo "unknown train step $sub"; exit 2 ;;
  esac
  echo "train-$sub-end $(stamp) rc=$rc" >> /tmp/lease.log
  cp /tmp/train.log /tmp/lease.log "$OUT/" 2>/dev/null
  ls -la "$OUT"
  # a failed step stops a chain of steps (`train out 1 && train install && measure ...`)
  exit "$rc"
  ;;
*) echo "unknown step $step"; exit 2 ;;
esac
