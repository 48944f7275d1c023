#!/usr/bin/env bash
# The whole GPU validation in one command (docs/fidelity.md, "On a GPU: one command").
#
#   bash scripts/gpu_validate.sh            # both halves in sequence: a machine with Rust and a GPU
#   bash scripts/gpu_validate.sh --build    # the half that needs Rust: release binaries and the
#                                           # test binaries, copied with a manifest into
#                                           # target/gpu-validate/ (carry that folder to the GPU)
#   bash scripts/gpu_validate.sh --device   # the half that needs a GPU and no Rust, in phases
#                                           # ordered by value, each capped (--budget): the ignored
#                                           # GPU tests; `expertsim-calibrate --backend cuda` for
#                                           # every profile the live scenarios use; the real
#                                           # Qwen1.5-MoE-A2.7B expert, checked against cuBLAS's
#                                           # own times (scripts/vendor_check.py); `expertsim live
#                                           # --backend cuda` on every real-shape scenario under
#                                           # scenarios/live-gpu/; the fidelity table in
#                                           # docs/fidelity.md; the full Qwen calibration, timed
#   bash scripts/gpu_validate.sh --dry-run  # print the budgeted plan and every step of both halves
#                                           # (the exact commands) and exit 0; runs nothing, needs
#                                           # no GPU and no build
#
# Options:
#   --budget SECONDS  wall-clock seconds the device half may take (default 480, at least 100): each
#                   phase gets a cap (its share of the budget plus what earlier phases left
#                   unused, keeping every later phase's minimum), each command in a phase the
#                   phase's time left over the commands left, under `timeout`; a command that
#                   reaches its cap is stopped and reported as cut, and the next still runs. An
#                   ETA is printed before every command; a summary of every command's status and
#                   seconds is written to <logs>/summary.txt
#   --runs N        live runs of each scenario (default 3; the table gives ranges over them)
#   --out DIR       the live runs' outputs and the generated table
#                   (default results/gpu-validate/<device>)
#   --collect DIR   after the device half (also when phases were cut or failed), copy everything
#                   it wrote (profiles, logs with the summary, live outputs, docs/fidelity.md)
#                   into DIR under repository-relative paths, with summary.txt on top: for a
#                   machine whose files come back from one folder only (the device tool's $OUT)
#   --collect-tar FILE  also pack that folder into one gzipped tarball FILE (for a folder that
#                   brings back only a few files); implies --collect (a temporary folder if none)
#   --backend cpu   rehearse the device half on the CPU reference kernels with the scaled-down
#                   scenarios of scenarios/live/ (the real shapes take the CPU references hours):
#                   no GPU tests, no real Qwen shape and no nvidia-smi; profiles go under --out
#                   and docs/fidelity.md is left alone
#
# Libraries: the kernels load libnvrtc (libnvrtc.so or .so.12) and libcublas (libcublas.so or
# .so.12) at run time. The device half looks in $NVRTC_LIB, $CUBLAS_LIB, target/nvrtc (the PyPI
# NVRTC .ci/run installs), /usr/local/cuda's library folders and the Python packages' nvidia/*/lib
# folders, links an unversioned name to a CUDA 13 `.so.13` where that is all there is
# (target/gpu-validate/lib), puts the folders on LD_LIBRARY_PATH and logs what it found
# (<logs>/libraries.txt); the binaries print the files they loaded.
#
# Profiles: every live scenario is run on a profile calibrated on the device for it: its
# family's profile key (`profile_key_of`) is set with `--set` to
# <profiles>/<device>_<folder>-<name>.json, measured by `expertsim-calibrate --for-scenario`
# (only the counts the scenario can ask for; for MOSAIC and Chimera the dense-decode profile of
# its models, at their real widths with 1/8 of the layers on a GPU: `recipe`). A scenario of a
# family without a profile key stops the script (and its dry run) with an error.
# Logs: profiles/measured/logs/<device>/ (nvidia-smi's name, driver and clocks before and after,
# each test binary's and each calibration's output). The card's settings are only read, never set.
set -euo pipefail
cd "$(dirname "$0")/.."

GV=target/gpu-validate
MANIFEST=$GV/manifest.txt
GPU_TEST_REASON='needs a GPU: scripts/gpu_validate.sh'

mode=all
dry_run=0
runs=3
out=""
collect=""
collect_tar=""
budget=480
backend=cuda
usage="usage: bash scripts/gpu_validate.sh [--build | --device] [--dry-run] [--budget SECONDS] [--runs N] [--out DIR] [--collect DIR] [--collect-tar FILE] [--backend cuda|cpu]"
while (($#)); do
    case "$1" in
    --build) mode=build ;;
    --device) mode=device ;;
    --dry-run) dry_run=1 ;;
    --budget) budget=${2:?$usage}; shift ;;
    --runs) runs=${2:?$usage}; shift ;;
    --out) out=${2:?$usage}; shift ;;
    --collect) collect=${2:?$usage}; shift ;;
    --collect-tar) collect_tar=${2:?$usage}; shift ;;
    --backend) backend=${2:?$usage}; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "$usage" >&2; exit 2 ;;
    esac
    shift
done
case "$backend" in cuda | cpu) ;; *) echo "--backend must be cuda or cpu; $usage" >&2; exit 2 ;; esac
if ! [[ "$runs" =~ ^[1-9][0-9]*$ ]]; then
    echo "--runs must be a positive integer; $usage" >&2
    exit 2
fi
# The budget must hold every phase's minimum and the collect reserve (MIN_BUDGET, checked against
# PHASE_MIN and COLLECT_RESERVE below).
MIN_BUDGET=100
if ! [[ "$budget" =~ ^[0-9]+$ ]] || ((budget < MIN_BUDGET || budget > 86400)); then
    echo "--budget must be a whole number of seconds from $MIN_BUDGET (every phase's minimum and the collect reserve) to 86400; $usage" >&2
    exit 2
fi
if [[ -n "$collect_tar" && -z "$collect" ]]; then
    collect=${TMPDIR:-/tmp}/gpu-validate-collect.$$
fi

# ---------------------------------------------------------------------------------------------
# Printing and running steps.

step_no=0
failures=()

step() {
    step_no=$((step_no + 1))
    printf '\n==> [%d] %s\n' "$step_no" "$*"
}

# Prints a command exactly as it runs, each word quoted for the shell where it needs quoting.
show() {
    local word line="  \$"
    for word in "$@"; do
        if [[ "$word" =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then
            line+=" $word"
        else
            line+=" '${word//\'/\'\\\'\'}'"
        fi
    done
    printf '%s\n' "$line"
}

# Runs a command (or only prints it on a dry run).
run() {
    show "$@"
    ((dry_run)) || "$@"
}

die() {
    echo "gpu_validate: $*" >&2
    exit 2
}

# A file-name-safe lowercase slug, as expertsim-calibrate names its default profiles.
slug() {
    printf '%s' "$1" | tr '[:upper:]' '[:lower:]' | sed -E 's/[^a-z0-9.]+/-/g; s/^-+//; s/-+$//'
}

# ---------------------------------------------------------------------------------------------
# What the sources and scenarios ask for.

# "file test_name" for every test marked #[ignore = "needs a GPU: scripts/gpu_validate.sh"].
gpu_tests_in_sources() {
    find . \( -name target -o -name .git -o -name results \) -prune -o -name '*.rs' -print |
        LC_ALL=C sort | xargs awk -v reason="$GPU_TEST_REASON" '
            index($0, "#[ignore = \"" reason "\"]") { want = 1; next }
            want && match($0, /fn [A-Za-z0-9_]+/) {
                print substr(FILENAME, 3), substr($0, RSTART + 3, RLENGTH - 3)
                want = 0
            }'
}

# Where the live scenarios of the backend are: the real shapes on a GPU, the scaled-down ones
# (which the CPU references run in seconds) in a CPU rehearsal.
live_dir() {
    if [[ "$backend" == cuda ]]; then echo scenarios/live-gpu; else echo scenarios/live; fi
}

# The live scenarios, sorted.
live_scenarios() {
    local f
    for f in "$(live_dir)"/*.toml; do
        [[ -e "$f" ]] && printf '%s\n' "$f"
    done | LC_ALL=C sort
}

# The family of a scenario file.
family_of() {
    awk -F'"' '/^[ \t]*family[ \t]*=/ { print $2; exit }' "$1"
}

# The profile key (table.key) a family prices its steps from.
profile_key_of() {
    case "$1" in
    serving) echo replica.scheduler.profile ;;
    *) return 1 ;;
    esac
}

# The stem of a scenario's calibrated profile: its folder and name (live-gpu-caps).
scenario_stem() {
    printf '%s-%s\n' "$(basename "$(dirname "$1")")" "$(basename "$1" .toml)"
}

# The calibration flags of a scenario: only what its steps can ask for (--for-scenario); for the
# families priced by a dense-decode profile, the scaling live mode then runs their models at (on
# a GPU the real widths with 1/8 of the layers) and a grid of kernel rows and cached tokens per
# row that covers their steps (docs/fidelity.md).
recipe() {
    local scenario=$1 family kind
    family=$(family_of "$scenario")
    profile_key_of "$family" >/dev/null || return 1
    RECIPE=(--for-scenario "$scenario")
    # The Chimera and MOSAIC presets (serving scenarios of dense replica groups) are priced by a
    # dense-decode profile of their models.
    kind=$family
    case "$(basename "$scenario" .toml)" in
    chimera | mosaic) kind=$(basename "$scenario" .toml) ;;
    esac
    case "$kind:$backend" in
    mosaic:cuda)
        RECIPE+=(--scale-widths 1 --scale-layers 8 --dense-rows 1,2,3,4,6,8,12,16,32,64,128,256
            --dense-contexts 8,16,32,64,128 --repetitions 5 --warmup 1) ;;
    chimera:cuda)
        RECIPE+=(--scale-widths 1 --scale-layers 8 --dense-rows 1,2,3,4,8,16,32,64,128,256,512
            --dense-contexts 128,256,512,768,1024 --repetitions 5 --warmup 1) ;;
    chimera:cpu)
        RECIPE+=(--dense-rows 1,2,3,4,8,16,32,64,128,256,512
            --dense-contexts 128,256,512,768,1024) ;;
    mosaic:cpu) ;;
    *:cpu)
        # The rehearsal: the CPU's own repetition counts (docs/fidelity.md), not the GPU's
        # default (adaptive, 10 to 500 per point; docs/calibration.md).
        RECIPE+=(--repetitions 15 --warmup 3) ;;
    esac
}

# ---------------------------------------------------------------------------------------------
# The build half.

build_half() {
    step "build: release binaries (expertsim, expertsim-calibrate)"
    run cargo build --release --workspace --locked

    step "build: test binaries (release profile, not run), their paths as cargo's JSON"
    show cargo test --release --workspace --locked --no-run --message-format=json
    printf '      (output -> %s)\n' "$GV/cargo-test.jsonl"
    if ((!dry_run)); then
        mkdir -p "$GV"
        cargo test --release --workspace --locked --no-run --message-format=json >"$GV/cargo-test.jsonl"
    fi

    step "build: list each test binary's ignored (GPU) tests; copy the binaries that have any, and the two release binaries, into $GV/bin/; write $MANIFEST"
    echo "  for each test executable in $GV/cargo-test.jsonl:"
    show TEST_BINARY --list --ignored --format=terse
    show cp target/release/expertsim target/release/expertsim-calibrate "$GV/bin/"
    show strip --strip-debug "$GV/bin/*"
    echo "  GPU tests the sources mark #[ignore = \"$GPU_TEST_REASON\"] (each must be in the manifest):"
    gpu_tests_in_sources | sed 's/^/    /'
    ((dry_run)) && return 0

    rm -rf "$GV/bin"
    mkdir -p "$GV/bin"
    cp target/release/expertsim target/release/expertsim-calibrate "$GV/bin/"
    {
        echo "# scripts/gpu_validate.sh --build: the binaries the device half runs"
        if git rev-parse HEAD >/dev/null 2>&1; then
            echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD || echo ' (with uncommitted changes)')"
        else
            echo "commit unknown (no git)"
        fi
        echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m)"
    } >"$MANIFEST.tmp"
    local exe crate names
    # Test executables ("test":true in the artifact's profile, not only in its target's) and
    # their package's folder (cargo runs a test binary there, with CARGO_MANIFEST_DIR set to
    # it; so does --device).
    grep '"reason":"compiler-artifact"' "$GV/cargo-test.jsonl" | grep -E '"profile":\{[^}]*"test":true' |
        grep '"executable":"' | sed -E 's/.*"manifest_path":"([^"]*)".*"executable":"([^"]*)".*/\2 \1/' |
        LC_ALL=C sort -u >"$GV/test-binaries.txt"
    [[ -s "$GV/test-binaries.txt" ]] || die "cargo listed no test executables (see $GV/cargo-test.jsonl)"
    while read -r exe crate; do
        names=$("$exe" --list --ignored --format=terse | sed -n 's/: test$//p' | paste -sd' ' -)
        [[ -n "$names" ]] || continue
        crate=$(dirname "$crate")
        crate=${crate#"$PWD"}
        crate=${crate#/}
        cp "$exe" "$GV/bin/"
        echo "test bin/$(basename "$exe") ${crate:-.} $names" >>"$MANIFEST.tmp"
    done <"$GV/test-binaries.txt"
    # Every GPU test of the sources must be in some binary's list.
    local file name missing=0
    while read -r file name; do
        if ! grep '^test ' "$MANIFEST.tmp" | tr ' ' '\n' | grep -Eq "(^|::)$name\$"; then
            echo "gpu_validate: $file: $name is marked as a GPU test but no test binary lists it as ignored" >&2
            missing=1
        fi
    done < <(gpu_tests_in_sources)
    ((missing == 0)) || exit 1
    # Smaller to carry (the device tool carries 64 MiB): drop debug info; panics keep their
    # file:line. Record the newest glibc symbol the binaries need (the device's must be newer).
    if command -v strip >/dev/null 2>&1; then
        strip --strip-debug "$GV"/bin/*
    fi
    if command -v objdump >/dev/null 2>&1; then
        echo "needs $(objdump -T "$GV"/bin/* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1)" >>"$MANIFEST.tmp"
    fi
    mv "$MANIFEST.tmp" "$MANIFEST"
    cat "$MANIFEST"
    du -sh "$GV/bin"
}

# ---------------------------------------------------------------------------------------------
# The budget of the device half.

# The phases in the order they run, most valuable first, with their share of the budget (percent
# of what is left after the collect reserve) and the fewest seconds that make one worth starting.
PHASE_TITLES=(
    "preflight: the GPU (read-only), the build manifest, the libraries"
    "the GPU tests (every kernel against its CPU reference, calibration and live on CUDA)"
    "calibrate every profile the live scenarios use"
    "calibrate the real Qwen1.5-MoE-A2.7B expert to 2,048 tokens; against cuBLAS's own times"
    "the live runs"
    "the fidelity table"
    "calibrate the real Qwen1.5-MoE-A2.7B shape with every default, timed"
)
PHASE_SHARE=(3 14 15 7 37 2 22)
PHASE_MIN=(10 20 10 10 20 5 15)
# Seconds kept for copying and packing what was measured.
COLLECT_RESERVE=10
min_total=$COLLECT_RESERVE
for m in "${PHASE_MIN[@]}"; do min_total=$((min_total + m)); done
((min_total == MIN_BUDGET)) || die "MIN_BUDGET ($MIN_BUDGET) is not the phases' minimums plus the collect reserve ($min_total)"

# Planned seconds of phase $1 at the budget: its share, at least its minimum.
planned_cap() {
    local i=$1 cap
    cap=$(((budget - COLLECT_RESERVE) * PHASE_SHARE[i] / 100))
    ((cap < PHASE_MIN[i])) && cap=${PHASE_MIN[i]}
    echo "$cap"
}

print_plan() {
    local i total=0 cap
    printf '\nbudgeted plan of the device half (--budget %d s): each phase may use its cap plus what\n' "$budget"
    printf 'earlier phases left unused (never the minimum of a later one); each command in a phase its\n'
    printf "phase's time left over the commands left; %d s are kept for collecting\n" "$COLLECT_RESERVE"
    printf '  %-3s %-86s %6s %8s %8s\n' "#" "phase" "share" "cap (s)" "min (s)"
    for ((i = 0; i < ${#PHASE_TITLES[@]}; i++)); do
        cap=$(planned_cap "$i")
        total=$((total + cap))
        printf '  %-3d %-86s %5d%% %8d %8d\n' "$((i + 1))" "${PHASE_TITLES[i]}" "${PHASE_SHARE[i]}" "$cap" "${PHASE_MIN[i]}"
    done
    printf '  %-3s %-86s %6s %8d\n' "" "collect (--collect / --collect-tar)" "" "$COLLECT_RESERVE"
    printf '  %-3s %-86s %6s %8d\n' "" "total" "" "$((total + COLLECT_RESERVE))"
}

T0=$SECONDS
phase=-1
phase_deadline=0
carry=0
phase_start=0
summary=()

now() { echo $((SECONDS - T0)); }

# Starts phase $1: its cap is its planned seconds plus the carry, within what the budget
# leaves after every later phase's minimum. Returns 1 (skip it) when that is under its minimum;
# the preflight (phase 0), which every later phase needs, always runs.
begin_phase() {
    phase=$1
    local later=0 j cap available t
    for ((j = phase + 1; j < ${#PHASE_TITLES[@]}; j++)); do
        later=$((later + PHASE_MIN[j]))
    done
    t=$(now)
    cap=$(($(planned_cap "$phase") + carry))
    available=$((budget - COLLECT_RESERVE - t - later))
    ((cap > available)) && cap=$available
    step "phase $((phase + 1))/${#PHASE_TITLES[@]}: ${PHASE_TITLES[phase]}"
    if ((dry_run)); then
        printf '  (cap %d s)\n' "$(planned_cap "$phase")"
        return 0
    fi
    if ((cap < PHASE_MIN[phase] && phase > 0)); then
        printf '  [%d s of %d s] skipped: %d s left for it, under its minimum of %d s\n' "$t" "$budget" "$cap" "${PHASE_MIN[phase]}"
        summary+=("phase $((phase + 1)) | ${PHASE_TITLES[phase]} | skipped (no time left) | 0")
        failures+=("phase $((phase + 1)) skipped")
        carry=0
        return 1
    fi
    phase_start=$t
    phase_deadline=$((t + cap))
    printf '  [%d s of %d s] cap %d s (planned %d, carried %d); this phase ends by %d s, the budget at %d s\n' \
        "$t" "$budget" "$cap" "$(planned_cap "$phase")" "$carry" "$phase_deadline" "$budget"
}

end_phase() {
    ((dry_run)) && return 0
    local used
    used=$(($(now) - phase_start))
    carry=$((phase_deadline - phase_start - used))
    ((carry < 0)) && carry=0
    printf '  phase %d took %d s; %d s carried to the next\n' "$((phase + 1))" "$used" "$carry"
}

# The fewest seconds a command of a phase is left for each command after it.
COMMAND_RESERVE=8

# Runs a command of the current phase under `timeout`, with its output shown and also written to
# LOG: its cap is the phase's time left, less COMMAND_RESERVE for each of the LEFT - 1 commands
# after it (at least an even share of what is left), so a long command may use the time short
# ones leave. A failure or a cut (the cap reached) is recorded under NAME and does not stop the
# script.
run_capped() {
    local name=$1 log=$2 left=$3
    shift 3
    show "$@"
    printf '      (output -> %s)\n' "$log"
    ((dry_run)) && return 0
    local t cap rc=0 status
    t=$(now)
    cap=$((phase_deadline - t - (left - 1) * COMMAND_RESERVE))
    ((cap < (phase_deadline - t) / left)) && cap=$(((phase_deadline - t) / left))
    if ((cap < 1)); then
        echo "  skipped: the phase's cap is reached"
        summary+=("$name | skipped (phase cap reached) | 0 s | $log")
        failures+=("$name (skipped)")
        return 0
    fi
    printf '  [%d s of %d s] %s: cap %d s; ETA: this phase by %d s, everything by %d s at the latest\n' \
        "$t" "$budget" "$name" "$cap" "$phase_deadline" "$budget"
    mkdir -p "$(dirname "$log")"
    set +e
    timeout -k 5 "$cap" "$@" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    set -e
    t=$(($(now) - t))
    case "$rc" in
    0) status=ok ;;
    124 | 137) status="CUT at its cap of $cap s" ;;
    *) status="FAILED (exit $rc)" ;;
    esac
    summary+=("$name | $status | $t s | $log")
    if ((rc != 0)); then
        echo "$status: $name (log: $log)" >&2
        failures+=("$name: $status")
    fi
    return 0
}

# ---------------------------------------------------------------------------------------------
# Libraries: NVRTC and cuBLAS, loaded at run time by the kernels (cudarc's names: libnvrtc.so,
# libnvrtc.so.12, libcublas.so, libcublas.so.12; a CUDA 13 install has .so.13 files).

# Folders that may hold CUDA libraries, most specific first.
library_dirs() {
    local dir py
    for dir in "${NVRTC_LIB:-}" "${CUBLAS_LIB:-}" "$PWD/target/nvrtc/nvidia/cuda_nvrtc/lib" \
        /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
        /usr/local/cuda-*/targets/x86_64-linux/lib; do
        [[ -n "$dir" && -d "$dir" ]] && printf '%s\n' "$dir"
    done
    if command -v python3 >/dev/null 2>&1; then
        for py in $(python3 -c 'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()] + sys.path))' 2>/dev/null); do
            for dir in "$py"/nvidia/cublas/lib "$py"/nvidia/cuda_nvrtc/lib "$py"/nvidia/cu13/lib; do
                [[ -d "$dir" ]] && printf '%s\n' "$dir"
            done
        done
    fi
    return 0
}

# The first folder (of library_dirs) with a file libNAME.so*; prints "folder file" of the name
# cudarc loads there (libNAME.so or libNAME.so.12), else of the newest libNAME.so.N.
find_library() {
    local name=$1 dir f
    while read -r dir; do
        for f in "$dir/lib$name.so" "$dir/lib$name.so.12"; do
            [[ -e "$f" ]] && { printf '%s %s\n' "$dir" "$f"; return 0; }
        done
        f=$(ls "$dir/lib$name.so."[0-9]* 2>/dev/null | sort -V | tail -n 1 || true)
        [[ -n "$f" ]] && { printf '%s %s\n' "$dir" "$f"; return 0; }
    done < <(library_dirs | awk '!seen[$0]++')
    return 1
}

# Puts NVRTC's and cuBLAS's folders on LD_LIBRARY_PATH, behind target/gpu-validate/lib with an
# unversioned link where a folder has only a CUDA 13 .so.13; logs it all to $1.
setup_libraries() {
    local log=$1 links=$PWD/$GV/lib name found dir file dirs=() lines=()
    for name in nvrtc cublas cublasLt; do
        if found=$(find_library "$name"); then
            dir=${found%% *}
            file=${found#* }
            dirs+=("$dir")
            case "$file" in
            */lib$name.so | */lib$name.so.12) lines+=("lib$name: $file (a name cudarc loads)") ;;
            *)
                lines+=("lib$name: $file, linked as $links/lib$name.so")
                if ((!dry_run)); then
                    mkdir -p "$links"
                    ln -sfn "$file" "$links/lib$name.so"
                fi
                dirs=("$links" "${dirs[@]}")
                ;;
            esac
        else
            lines+=("lib$name: not found in $(library_dirs | awk '!seen[$0]++' | paste -sd' ' -)")
        fi
    done
    if ((${#dirs[@]})); then
        local joined
        joined=$(printf '%s\n' "${dirs[@]}" | awk '!seen[$0]++' | paste -sd: -)
        export LD_LIBRARY_PATH="$joined${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    printf '  %s\n' "${lines[@]}"
    echo "  LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    if ((!dry_run)); then
        {
            printf '%s\n' "${lines[@]}"
            echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
            for dir in "${dirs[@]}"; do ls -l "$dir"/libnvrtc* "$dir"/libcublas* 2>/dev/null || true; done
            ldconfig -p 2>/dev/null | grep -Ei 'nvrtc|cublas' || true
        } >"$log"
    fi
}

# ---------------------------------------------------------------------------------------------
# The device half.

QWEN_REFERENCE=profiles/reference/nvidia-h200_cublas-qwen1.5-moe-expert.csv

device_half() {
    local device_name="" device="<device>"
    print_plan
    begin_phase 0
    if [[ "$backend" == cuda ]]; then
        show nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,pstate,temperature.gpu,power.draw --format=csv
        if command -v nvidia-smi >/dev/null 2>&1; then
            device_name=$(timeout 20 nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -n 1)
            device=$(slug "$device_name")
        elif ((dry_run)); then
            echo "  (no nvidia-smi here: <device> below stands for the slug of its GPU name, e.g. nvidia-h200)"
        else
            die "nvidia-smi not found: the device half needs an NVIDIA GPU with its driver (on a machine without one, use --dry-run, or --backend cpu for a rehearsal)"
        fi
    else
        device=cpu-rehearsal
        echo "  (--backend cpu: a rehearsal on the CPU reference kernels; no GPU is used)"
    fi
    [[ -n "$out" ]] || out=results/gpu-validate/$device
    local logs=profiles/measured/logs/$device profiles_dir=profiles/measured
    if [[ "$backend" == cpu ]]; then
        logs=$out/logs
        profiles_dir=$out/profiles
    fi
    local bin=$GV/bin
    echo "  manifest: $MANIFEST (written by --build); binaries: $bin/"
    show "$bin/expertsim" --version
    show "$bin/expertsim-calibrate" --version
    if ((!dry_run)); then
        [[ -f "$MANIFEST" ]] || die "no build manifest at $MANIFEST: run \`bash scripts/gpu_validate.sh --build\` on a machine with Rust first, and carry $GV"
        # The carried binaries start here (a missing glibc version would say so now).
        "$bin/expertsim" --version
        "$bin/expertsim-calibrate" --version
        mkdir -p "$logs" "$out"
        cp "$MANIFEST" "$logs/manifest.txt"
        if [[ "$backend" == cuda ]]; then
            {
                date -u +%Y-%m-%dT%H:%M:%SZ
                timeout 20 nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,pstate,temperature.gpu,power.draw --format=csv
            } | tee "$logs/nvidia-smi-before.csv"
            timeout 20 nvidia-smi >"$logs/nvidia-smi.txt" 2>&1 || true
        fi
    fi
    echo "  libraries (-> $logs/libraries.txt):"
    setup_libraries "$logs/libraries.txt"
    end_phase

    # Phase 2: the GPU tests.
    if begin_phase 1; then
        if [[ "$backend" == cpu ]]; then
            echo "  (skipped: --backend cpu rehearses without a GPU)"
        elif [[ -f "$MANIFEST" ]]; then
            local tag path crate names left
            left=$(grep -c '^test ' "$MANIFEST" || true)
            while read -r tag path crate names; do
                [[ "$tag" == test ]] || continue
                # As cargo runs it: in its package's folder, CARGO_MANIFEST_DIR naming that
                # folder; --nocapture so that the tests' measured errors reach the log.
                # shellcheck disable=SC2086  # the test names are words
                run_capped "GPU tests of $(basename "$path")" "$logs/tests-$(basename "$path").log" "$left" \
                    env -C "$crate" CARGO_MANIFEST_DIR="$PWD/$crate" "$PWD/$GV/$path" --ignored --exact --nocapture --test-threads 1 $names
                left=$((left - 1))
            done <"$MANIFEST"
        else
            echo "  (no manifest yet: after --build, each line \"test bin/BINARY PACKAGE_DIR NAME...\" of $MANIFEST runs as)"
            show env -C PACKAGE_DIR CARGO_MANIFEST_DIR="$PWD/PACKAGE_DIR" "$PWD/$GV/bin/BINARY" --ignored --exact --nocapture --test-threads 1 NAME...
        fi
        echo "  GPU tests in the sources (by file: the test binary of that crate or test file):"
        gpu_tests_in_sources | sed 's/^/    /'
        end_phase
    fi

    # Phase 3: a profile of every live scenario, calibrated on the device for it.
    local scenario stem key
    local scenarios=()
    for scenario in $(live_scenarios); do
        recipe "$scenario" || die "$scenario: family \`$(family_of "$scenario")\` has no profile key in scripts/gpu_validate.sh (add one to profile_key_of)"
        scenarios+=("$scenario")
    done
    ((${#scenarios[@]})) || die "no live scenario under $(live_dir)"
    if begin_phase 2; then
        local left=${#scenarios[@]}
        for scenario in "${scenarios[@]}"; do
            recipe "$scenario"
            stem=$(scenario_stem "$scenario")
            echo "  $scenario on the $backend backend -> $profiles_dir/${device}_$stem.json"
            run_capped "calibrate $stem" "$logs/calibrate-$stem.log" "$left" \
                "$bin/expertsim-calibrate" --backend "$backend" "${RECIPE[@]}" \
                --output "$profiles_dir/${device}_$stem.json"
            left=$((left - 1))
        done
        end_phase
    fi

    # Phase 4: the real Qwen1.5-MoE-A2.7B expert (with its GEMMs alone, which split the layer
    # into its fixed part and each expert's GEMM pair) and dense curves to 2,048 tokens, then the
    # expert against cuBLAS's own times for its two GEMMs.
    local qwen=qwen1.5-moe-a2.7b
    if begin_phase 3; then
        if [[ "$backend" == cpu ]]; then
            echo "  (skipped: the real shape is a GPU's work; the CPU references take hours)"
        else
            echo "  the expert and dense curves to 2,048 tokens -> $profiles_dir/${device}_$qwen-to2048.json"
            run_capped "calibrate $qwen to 2048 tokens" "$logs/calibrate-$qwen-to2048.log" 2 \
                "$bin/expertsim-calibrate" --backend cuda --model "$qwen" --dense-limit 2048 \
                --sparse-step 0 --sparse-limit 0 --max-batch 8 --contexts 1024 --context-batches 1 \
                --reroute-tokens 16 --adapters 1 \
                --output "$profiles_dir/${device}_$qwen-to2048.json"
            echo "  its expert at 64-2,048 tokens against cuBLAS's w13 + w2 ($QWEN_REFERENCE)"
            run_capped "vendor check of $qwen" "$logs/vendor-check-$qwen.log" 1 \
                python3 scripts/vendor_check.py "$profiles_dir/${device}_$qwen-to2048.json" \
                "$QWEN_REFERENCE" --tokens 64-2048 --max-ratio 1.5
        fi
        end_phase
    fi

    # Phase 5: every live scenario on its profile, --runs rounds (each round runs every
    # scenario once, so a phase cut short still has a run of each).
    if begin_phase 4; then
        local i name profile_arg dir_name left
        left=$((${#scenarios[@]} * runs))
        for ((i = 1; i <= runs; i++)); do
            for scenario in "${scenarios[@]}"; do
                name=$(basename "$scenario" .toml)
                stem=$(scenario_stem "$scenario")
                key=$(profile_key_of "$(family_of "$scenario")")
                if [[ "$backend" == cpu ]]; then
                    # Under --out, which may lie anywhere: an absolute path.
                    profile_arg="$profiles_dir/${device}_$stem.json"
                    [[ "$profile_arg" == /* ]] || profile_arg="$PWD/$profile_arg"
                else
                    profile_arg="../../$profiles_dir/${device}_$stem.json"
                fi
                echo "  live $scenario on the $backend backend, run $i of $runs, $key = $profile_arg"
                dir_name="$out/live/$name/run-$i"
                if ((!dry_run)) && [[ ! -f "$profiles_dir/${device}_$stem.json" ]]; then
                    echo "  skipped: no $profiles_dir/${device}_$stem.json (its calibration did not finish)"
                    summary+=("live $name run $i | skipped (no profile) | 0 s | -")
                    failures+=("live $name run $i (skipped: no profile)")
                    left=$((left - 1))
                    continue
                fi
                run_capped "live $name run $i" "$out/live/$name/run-$i.log" "$left" \
                    "$bin/expertsim" live "$scenario" --backend "$backend" --out "$dir_name" \
                    --set "$key=\"$profile_arg\""
                left=$((left - 1))
            done
        done
        end_phase
    fi

    # Phase 6: the fidelity table.
    if [[ "$backend" == cuda ]]; then
        show nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,pstate,temperature.gpu,power.draw --format=csv
        if ((!dry_run)); then
            {
                date -u +%Y-%m-%dT%H:%M:%SZ
                timeout 20 nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,pstate,temperature.gpu,power.draw --format=csv
            } | tee "$logs/nvidia-smi-after.csv"
        fi
    fi
    if begin_phase 5; then
        local doc_args=(--doc docs/fidelity.md)
        [[ "$backend" == cpu ]] && doc_args=()
        echo "  from every fidelity.json -> $out/fidelity-table.md${doc_args:+ and docs/fidelity.md (between its gpu-fidelity-table markers)}"
        local smi_args=()
        [[ "$backend" == cuda ]] && smi_args=(--nvidia-smi "$logs/nvidia-smi-before.csv" --nvidia-smi-after "$logs/nvidia-smi-after.csv")
        local table_cmd=(python3 scripts/fidelity_table.py "${doc_args[@]}" --out "$out/fidelity-table.md"
            --manifest "$MANIFEST" "${smi_args[@]}")
        if ((dry_run)); then
            show "${table_cmd[@]}"
            printf '      --profile %s ... %s ...\n' "$profiles_dir/${device}_STEM.json" "$out/live/SCENARIO/run-N/fidelity.json"
        else
            shopt -s nullglob
            local reports=("$out"/live/*/run-*/fidelity.json) profile
            for scenario in "${scenarios[@]}"; do
                profile="$profiles_dir/${device}_$(scenario_stem "$scenario").json"
                [[ -f "$profile" ]] && table_cmd+=(--profile "$profile")
            done
            shopt -u nullglob
            if ((${#reports[@]})); then
                run_capped "fidelity table" "$logs/fidelity-table.log" 1 "${table_cmd[@]}" "${reports[@]}"
            else
                echo "no fidelity.json was written: no table" >&2
                failures+=("fidelity table (no live run finished)")
            fi
        fi
        end_phase
    fi

    # Phase 7: the real Qwen1.5-MoE-A2.7B shape with every default (482 points and the expert's
    # GEMMs alone), timed: what a full calibration of a production shape takes on this card.
    if begin_phase 6; then
        if [[ "$backend" == cpu ]]; then
            echo "  (skipped: the real shape is a GPU's work; the CPU references take hours)"
        else
            echo "  every default (the full calibration, timed) -> $profiles_dir/${device}_$qwen.json"
            run_capped "calibrate $qwen (every default)" "$logs/calibrate-$qwen.log" 1 \
                "$bin/expertsim-calibrate" --backend cuda --model "$qwen" \
                --output "$profiles_dir/${device}_$qwen.json"
        fi
        end_phase
    fi

    # The summary, then everything collected.
    if ((!dry_run)); then
        {
            echo "# scripts/gpu_validate.sh --device --budget $budget: $(date -u +%Y-%m-%dT%H:%M:%SZ), device ${device_name:-$device}, $(now) s"
            echo "# command | status | seconds | log"
            printf '%s\n' "${summary[@]}"
            if ((${#failures[@]})); then
                echo "# not ok (${#failures[@]}):"
                printf '#   %s\n' "${failures[@]}"
            else
                echo "# every command ran to the end with exit code 0"
            fi
        } >"$logs/summary.txt"
        step "summary ($logs/summary.txt)"
        cat "$logs/summary.txt"
    fi
    if [[ -n "$collect" ]]; then
        step "collect: copy everything written into $collect (repository-relative paths; summary.txt on top)${collect_tar:+, packed into $collect_tar}"
        local items=("$logs" "$out")
        [[ "$backend" == cuda ]] && items+=("$profiles_dir/${device}_STEM.json" docs/fidelity.md)
        show cp -R --parents "${items[@]}" "$collect/"
        [[ -n "$collect_tar" ]] && show tar -czf "$collect_tar" -C "$collect" .
        if ((!dry_run)); then
            mkdir -p "$collect"
            shopt -s nullglob
            items=("$logs" "$out")
            [[ "$backend" == cuda ]] && items+=("$profiles_dir/${device}"_*.json docs/fidelity.md)
            shopt -u nullglob
            local item
            for item in "${items[@]}"; do
                [[ -e "$item" ]] || continue
                item=${item#"$PWD"/}
                if [[ "$item" == /* ]]; then
                    cp -R "$item" "$collect/" # an --out outside the repository
                else
                    cp -R --parents "$item" "$collect/"
                fi
            done
            cp "$logs/summary.txt" "$collect/summary.txt"
            if [[ -n "$collect_tar" ]]; then
                mkdir -p "$(dirname "$collect_tar")"
                tar -czf "$collect_tar" -C "$collect" .
                echo "  packed $(tar -tzf "$collect_tar" | grep -vc '/$') files into $collect_tar ($(du -h "$collect_tar" | cut -f1))"
            fi
        fi
    fi
}

case "$mode" in
build) build_half ;;
device) device_half ;;
all)
    build_half
    device_half
    ;;
esac

if ((dry_run)); then
    printf '\ndry run: %d steps listed, nothing was run\n' "$step_no"
    exit 0
fi
if ((${#failures[@]})); then
    printf '\nnot ok (%d): failed, cut at their caps or skipped:\n' "${#failures[@]}" >&2
    printf '  %s\n' "${failures[@]}" >&2
    exit 1
fi
printf '\ngpu_validate: every step passed\n'
