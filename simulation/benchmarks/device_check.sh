#!/usr/bin/env bash
# Everything to measure on a lent GPU, in one call (docs/performance.md#measuring-on-a-lent-gpu):
#
#   OUT=<folder> bash simulation/benchmarks/device_check.sh            # on the GPU machine, ~8 minutes on an H200
#   OUT=<folder> bash simulation/benchmarks/device_check.sh --smoke    # the same parts, tiny, on a CPU (a check)
#   ... --only fedavg10,bf16    (some parts)    --budget 300    (seconds for all parts; default 470)
#
# Each part runs under `timeout` (its own limit, never past what is left of the budget) and writes everything it
# prints to $OUT/<part>.txt (and its figures to $OUT/<part>.json where the benchmark writes one); a part started too
# late to fit says so in its file, and the script then exits 1, as it does when a part fails or is stopped; it ends
# within the budget plus 10 s (a part past its limit is killed 10 s
# after being asked to stop). $OUT/summary.txt has every part's exit status, seconds and figure lines; at the end
# the parts' files go into $OUT/parts.tar.gz (a call brings back at most 8 files). The
# parts, most wanted first (the workload: ResNet-18-GN, 50 steps of batch 50 per client, fake CIFAR-10):
#   env        nvidia-smi, torch and its CUDA, the git commit
#   fedavg10   gpu_round: FedAvg batched, 10 clients, with bound_s / dense_s and bound_ratio / dense_ratio, and again
#              with the server rule kept on the host (host_rule_over_batched)
#   stateful   round_phases: scaffold, feddyn, fedspeed, fedsmoo, fadamgt, losac: round_over_training each
#   dpsgd_parts private_step: one DP-SGD step of 10 stacked clients in parts (per-record gradients, clipping, noise;
#              the suite's pieces of records and one piece; by ghost clipping) against the plain stacked gradient
#   phases100  round_phases: FedAvg batched, 100 clients: where the round's time beyond training goes
#   cuda_tests pytest on every test that needs CUDA (python -m simulation.benchmarks.cuda_tests)
#   fedavg40   gpu_round: FedAvg batched, 40 clients, with the bounds
#   bf16       gpu_round: FedAvg batched, 10 clients, autocast bf16, with the bf16 bounds
#   dpsgd      gpu_round: FedAvg batched, 10 clients, plain and with dp-sgd=true, dp-sgd-per-record=ghost
#              (variant_over_batched; the vmap method took 27.8 times the plain round on an H200)
#   variants   batching_bound: channels-last and per-client graphs on 4 streams against the graphed stacked step
#   fedavg100  gpu_round: FedAvg batched, 100 clients, with the bounds
#   compile    batching_bound: torch.compile of the stacked step (compiling takes a while: last)
# flwr is taken from .whl/ (wheels carried to the machine, docs/performance.md) when the Python here lacks it.
set -u
cd "$(dirname "$0")/../.." || exit 1

SMOKE=0
ONLY=""
BUDGET=${DEVICE_CHECK_BUDGET_S:-}
while [ $# -gt 0 ]; do
    case "$1" in
        --smoke) SMOKE=1 ;;
        --only) ONLY="$2"; shift ;;
        --budget) BUDGET="$2"; shift ;;
        *) echo "device_check.sh: unknown argument '$1' (allowed: --smoke, --only PART[,PART], --budget SECONDS)" >&2
           exit 2 ;;
    esac
    shift
done
[ -z "$BUDGET" ] && { [ "$SMOKE" = 1 ] && BUDGET=1200 || BUDGET=470; }  # a slow CPU cuts no smoke part
case "$BUDGET" in '' | *[!0-9]*) echo "device_check.sh: --budget '$BUDGET' is not a whole number of seconds" >&2; exit 2 ;; esac
PARTS="env fedavg10 stateful dpsgd_parts phases100 cuda_tests fedavg40 bf16 dpsgd variants fedavg100 compile"
for part in ${ONLY//,/ }; do
    case " $PARTS " in *" $part "*) ;; *) echo "device_check.sh: --only '$part': allowed parts are ${PARTS// /, }" >&2; exit 2 ;; esac
done

OUT=${OUT:-device-check-out}
mkdir -p "$OUT" || exit 1
PYTHON=${PYTHON:-python3}
export FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1 FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
export PYTHONUNBUFFERED=1
if ! "$PYTHON" -c "import flwr" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
    SITE=${TMPDIR:-/tmp}/device-check-site
    "$PYTHON" -m pip install -q --no-index --no-deps --target "$SITE" .whl/*.whl >"$OUT/wheels.txt" 2>&1
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi

if [ "$SMOKE" = 1 ]; then  # every part's code path, in seconds, on a CPU
    WORK="--model cnn --steps 3 --batch 8 --samples 40 --rounds 2 --device cpu"
    C10=2; C40=3; C100=4; ROUNDS_SHORT=2; BOUND="--clients 2 --batch 4 --repeats 1 --steps 2 --device cpu --model cnn"
    PRIVATE="--clients 2 --batch 4 --repeats 1 --device cpu --model cnn"
    TESTS_ARGS="--collect-only"; MIN_LEFT=0
else
    WORK="--rounds 4"
    C10=10; C40=40; C100=100; ROUNDS_SHORT=3; BOUND="--repeats 5"
    PRIVATE="--repeats 3"
    TESTS_ARGS=""; MIN_LEFT=20
fi
START=$(date +%s)
INCOMPLETE=""  # the parts that failed, stopped at their limit or did not fit the budget: the script then exits 1
: >"$OUT/summary.txt"

wanted() { [ -z "$ONLY" ] || case ",$ONLY," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# part NAME LIMIT_SECONDS COMMAND...: the command under timeout, its output tee'd to $OUT/NAME.txt
part() {
    local name=$1 limit=$2
    shift 2
    wanted "$name" || return 0
    local left=$((BUDGET - ($(date +%s) - START)))
    [ "$left" -lt 0 ] && left=0
    if [ "$left" -le "$MIN_LEFT" ]; then
        echo "$name: not run: ${left} s of the ${BUDGET} s budget left" | tee "$OUT/$name.txt" >>"$OUT/summary.txt"
        INCOMPLETE="$INCOMPLETE $name"
        return 0
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    printf '# %s\n# limit %s s, started %s\n' "$*" "$limit" "$(date -u +%H:%M:%S)" >"$OUT/$name.txt"
    local began=$(date +%s)
    timeout -k 10 "$limit" "$@" </dev/null 2>&1 | tee -a "$OUT/$name.txt"
    local rc=${PIPESTATUS[0]}
    local note=""
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && note=" (stopped at its ${limit} s limit)"
    echo "$name: exit $rc, $(($(date +%s) - began)) s$note" >>"$OUT/summary.txt"
    [ "$rc" = 0 ] || INCOMPLETE="$INCOMPLETE $name"
}

environment() {
    if command -v nvidia-smi >/dev/null; then nvidia-smi 2>&1; else echo "nvidia-smi: not here"; fi
    "$PYTHON" -c "import sys, torch; print('python', sys.version.split()[0], '| torch', torch.__version__, '| cuda', \
torch.version.cuda, '| device', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none')"
    "$PYTHON" -c "import flwr; print('flwr', flwr.__version__)" 2>&1 | tail -1
    echo "commit ${DEVICE_CHECK_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo 'unknown (no git here)')}"
    git status --short 2>/dev/null | head -20
}

cuda_tests() {
    if ! "$PYTHON" -c "import pytest" 2>/dev/null; then
        echo "pytest is not installed here: carry its wheels in .whl/ (docs/performance.md#measuring-on-a-lent-gpu)"
        return 1
    fi
    # shellcheck disable=SC2046  # one node id a word
    "$PYTHON" -m pytest -q -p no:cacheprovider $TESTS_ARGS $("$PYTHON" -m simulation.benchmarks.cuda_tests)
}

export -f environment cuda_tests  # run by `timeout` through bash
export PYTHON TESTS_ARGS
GPU_ROUND="$PYTHON -m simulation.benchmarks.gpu_round --algorithms fedavg --paths batched"
# shellcheck disable=SC2086  # the flag strings split into words on purpose
{
    part env 30 bash -c environment
    part fedavg10 120 $GPU_ROUND $WORK --clients $C10 --host-rule --json "$OUT/fedavg10.json"
    part stateful 150 "$PYTHON" -m simulation.benchmarks.round_phases $WORK --clients $C10 \
        --algorithms scaffold,feddyn,fedspeed,fedsmoo,fadamgt,losac --json "$OUT/stateful.json"
    part dpsgd_parts 60 "$PYTHON" -m simulation.benchmarks.private_step $PRIVATE
    part phases100 90 "$PYTHON" -m simulation.benchmarks.round_phases $WORK --rounds $ROUNDS_SHORT --clients $C100 \
        --algorithms fedavg
    part cuda_tests 90 bash -c cuda_tests
    part fedavg40 100 $GPU_ROUND $WORK --rounds $ROUNDS_SHORT --clients $C40 --bound-repeats 2 \
        --json "$OUT/fedavg40.json"
    part bf16 80 $GPU_ROUND $WORK --clients $C10 --autocast bf16 --json "$OUT/bf16.json"
    part dpsgd 110 $GPU_ROUND $WORK --rounds $ROUNDS_SHORT --clients $C10 --no-bounds \
        --variant "dp-sgd=true dp-sgd-noise=1.0 dp-sgd-clip=1.0 dp-sgd-per-record='ghost'" --json "$OUT/dpsgd.json"
    part variants 80 "$PYTHON" -m simulation.benchmarks.batching_bound $BOUND --variants channels-last,streams
    part fedavg100 160 $GPU_ROUND $WORK --rounds $ROUNDS_SHORT --clients $C100 --bound-repeats 2 \
        --json "$OUT/fedavg100.json"
    part compile 150 "$PYTHON" -m simulation.benchmarks.batching_bound $BOUND --variants compile \
        $([ "$SMOKE" = 1 ] && echo "--compile-backend eager")
}

{
    echo "# the figures (docs/performance.md#measuring-on-a-lent-gpu), $(($(date +%s) - START)) s in all"
    grep -H -E "^(bound|dense)(_sam)?_s |_ratio |batched.*s/round|variant_over_batched|host_rule_over_batched|round_over_training|\
^(stacked step|variant )|(passed|failed|errors?|deselected|skipped) in [0-9.]+s|tests? collected|could not run|not available|\
^(plain stacked|private|ghost|  its|  their|  the clients)|^round [0-9]+: " \
        "$OUT"/*.txt 2>/dev/null | grep -v "/summary.txt:" | sed "s|^$OUT/||"
} >>"$OUT/summary.txt"
cat "$OUT/summary.txt"
# A call brings back at most 8 files: every part's files go into one archive beside summary.txt.
(cd "$OUT" && files=$(ls | grep -v -x -e summary.txt -e parts.tar.gz) && [ -n "$files" ] &&
    tar -czf parts.tar.gz $files && rm -f $files)  # shellcheck disable=SC2086  # one file name a word
if [ -n "$INCOMPLETE" ]; then
    echo "device_check.sh: parts that did not complete:$INCOMPLETE (see summary.txt)" >&2
    exit 1
fi
