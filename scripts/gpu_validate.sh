#!/usr/bin/env bash
# The whole GPU validation in one command (docs/fidelity.md, "On a GPU: one command").
#
#   bash scripts/gpu_validate.sh            # both halves in sequence: a machine with Rust and a GPU
#   bash scripts/gpu_validate.sh --build    # the half that needs Rust: release binaries and the
#                                           # test binaries, copied with a manifest into
#                                           # target/gpu-validate/ (carry that folder to the GPU)
#   bash scripts/gpu_validate.sh --device   # the half that needs a GPU and no Rust: the ignored
#                                           # GPU tests, `expertsim-calibrate --backend cuda` for
#                                           # every profile the live scenarios use, `expertsim
#                                           # live --backend cuda` on every scenario under
#                                           # scenarios/live/, the fidelity table in docs/fidelity.md
#   bash scripts/gpu_validate.sh --dry-run  # print every step of both halves (the exact commands)
#                                           # and exit 0; runs nothing, needs no GPU and no build
#
# Options:
#   --runs N        live runs of each scenario (default 3; the table gives ranges over them)
#   --out DIR       the live runs' outputs and the generated table
#                   (default results/gpu-validate/<device>)
#   --collect DIR   after the device half, copy everything it wrote (profiles, logs, live
#                   outputs, docs/fidelity.md) into DIR under repository-relative paths: for a
#                   machine whose files come back from one folder only (the device tool's $OUT)
#   --backend cpu   rehearse the device half on the CPU reference kernels: no GPU tests and no
#                   nvidia-smi; profiles go under --out and docs/fidelity.md is left alone
#
# Profiles: each live scenario names a CPU-measured profile (`profile = "../../profiles/measured/
# amd-epyc_<stem>.json"`); the device half calibrates the same stem on the GPU into
# profiles/measured/<device>_<stem>.json with the recipe below (the flags the CPU profile was
# measured with, docs/fidelity.md) and runs the scenario with `--set <table>.profile=...` on it.
# A scenario naming a stem without a recipe stops the script (and its dry run) with an error.
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
backend=cuda
usage="usage: bash scripts/gpu_validate.sh [--build | --device] [--dry-run] [--runs N] [--out DIR] [--collect DIR] [--backend cuda|cpu]"
while (($#)); do
    case "$1" in
    --build) mode=build ;;
    --device) mode=device ;;
    --dry-run) dry_run=1 ;;
    --runs) runs=${2:?$usage}; shift ;;
    --out) out=${2:?$usage}; shift ;;
    --collect) collect=${2:?$usage}; shift ;;
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

# Runs a command with its output shown and also written to LOG; a failure is recorded under
# NAME and does not stop the script (a GPU lease is short: the remaining steps still run).
run_logged() {
    local name=$1 log=$2
    shift 2
    show "$@"
    printf '      (output -> %s)\n' "$log"
    ((dry_run)) && return 0
    mkdir -p "$(dirname "$log")"
    if "$@" 2>&1 | tee "$log"; then
        return 0
    fi
    echo "FAILED: $name (log: $log)" >&2
    failures+=("$name")
    return 1
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

# The live scenarios, sorted.
live_scenarios() {
    local f
    for f in scenarios/live/*.toml; do
        [[ -e "$f" ]] && printf '%s\n' "$f"
    done | LC_ALL=C sort
}

# "table path" of the first `profile = "..."` key of a scenario ("-" for a top-level key).
profile_key() {
    awk '
        /^[ \t]*\[/ { table = $0; gsub(/[][ \t]/, "", table); next }
        /^[ \t]*profile[ \t]*=/ {
            v = $0; sub(/^[^"]*"/, "", v); sub(/".*$/, "", v)
            print (table == "" ? "-" : table), v
            exit
        }' "$1"
}

# The stem of a CPU profile's file name: amd-epyc_live-tiny-moe.json -> live-tiny-moe.
profile_stem() {
    local base
    base=$(basename "$1" .json)
    printf '%s\n' "${base#*_}"
}

# The dense model shapes (`shape = "..."`) of the scenarios using a stem, comma-separated.
dense_models_of() {
    local stem=$1 f key
    for f in $(live_scenarios); do
        key=$(profile_key "$f")
        [[ -n "$key" && "$(profile_stem "${key#* }")" == "$stem" ]] || continue
        awk -F'"' '/^[ \t]*shape[ \t]*=/ { print $2 }' "$f"
    done | awk '!seen[$0]++' | paste -sd, -
}

# The calibration flags of each profile stem (the ones its CPU profile was measured with).
recipe() {
    local stem=$1
    case "$stem" in
    live-tiny-moe)
        RECIPE=(--model live-tiny-moe --dense-limit 512 --sparse-step 0 --sparse-limit 0
            --max-batch 16 --contexts 1024 --context-batches 1,8 --reroute-tokens 16,64,256
            --adapters 2) ;;
    live-tiny-moe-ffn32)
        RECIPE=(--model live-tiny-moe --expert-ffn 32 --dense-limit 512 --sparse-step 0
            --sparse-limit 0 --max-batch 16 --contexts 1024 --context-batches 1,8
            --reroute-tokens 1,16,64,256 --adapters 3) ;;
    mosaic-live-dense)
        local models
        models=$(dense_models_of "$stem")
        [[ -n "$models" ]] || die "no \`shape = \"...\"\` in the scenarios that use $stem"
        RECIPE=(--dense-models "$models") ;;
    *) return 1 ;;
    esac
    if [[ "$backend" == cpu ]]; then
        # The rehearsal: the CPU's own repetition counts (docs/fidelity.md), not the GPU's
        # default (adaptive, 10 to 500 per point; docs/calibration.md).
        RECIPE+=(--repetitions 15 --warmup 3)
    fi
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
# The device half.

device_half() {
    local device_name="" device="<device>"
    step "device: preflight (the GPU, read-only: name, driver, clocks; the build manifest; NVRTC)"
    if [[ "$backend" == cuda ]]; then
        show nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,pstate,temperature.gpu,power.draw --format=csv
        if command -v nvidia-smi >/dev/null 2>&1; then
            device_name=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -n 1)
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
                nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,pstate,temperature.gpu,power.draw --format=csv
            } | tee "$logs/nvidia-smi-before.csv"
            nvidia-smi >"$logs/nvidia-smi.txt" 2>&1 || true
        fi
    fi
    # NVRTC: the kernels load libnvrtc.so.12 or libnvrtc.so at run time (cudarc). Use the
    # PyPI wheel of .ci/run when it is there, else the CUDA toolkit's.
    local dir nvrtc_dirs=()
    for dir in "${NVRTC_LIB:-}" "$PWD/target/nvrtc/nvidia/cuda_nvrtc/lib" /usr/local/cuda/lib64; do
        [[ -n "$dir" && -d "$dir" ]] && nvrtc_dirs+=("$dir")
    done
    if ((${#nvrtc_dirs[@]})); then
        local joined
        joined=$(IFS=:; echo "${nvrtc_dirs[*]}")
        export LD_LIBRARY_PATH="$joined${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    echo "  LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    if ((!dry_run)); then
        {
            echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
            for dir in "${nvrtc_dirs[@]}"; do ls -l "$dir"/libnvrtc* 2>/dev/null || true; done
            ldconfig -p 2>/dev/null | grep -i nvrtc || true
        } | tee "$logs/nvrtc.txt"
    fi

    # 2. The GPU tests.
    step "device: the ignored GPU tests of every test binary in the manifest (kernels against their CPU references at every tile size, persistent-grid bit identity, calibration and live on CUDA)"
    if [[ "$backend" == cpu ]]; then
        echo "  (skipped: --backend cpu rehearses without a GPU)"
    elif [[ -f "$MANIFEST" ]]; then
        local tag path crate names
        while read -r tag path crate names; do
            [[ "$tag" == test ]] || continue
            # As cargo runs it: in its package's folder, CARGO_MANIFEST_DIR naming that folder.
            # shellcheck disable=SC2086  # the test names are words
            run_logged "GPU tests of $(basename "$path")" "$logs/tests-$(basename "$path").log" \
                env -C "$crate" CARGO_MANIFEST_DIR="$PWD/$crate" "$PWD/$GV/$path" --ignored --exact $names || true
        done <"$MANIFEST"
    else
        echo "  (no manifest yet: after --build, each line \"test bin/BINARY PACKAGE_DIR NAME...\" of $MANIFEST runs as)"
        show env -C PACKAGE_DIR CARGO_MANIFEST_DIR="$PWD/PACKAGE_DIR" "$PWD/$GV/bin/BINARY" --ignored --exact NAME...
    fi
    echo "  GPU tests in the sources (by file: the test binary of that crate or test file):"
    gpu_tests_in_sources | sed 's/^/    /'

    # 3. Calibration of every profile the scenarios use.
    local scenario key table path stem
    declare -A calibrated=()
    local stems=()
    for scenario in $(live_scenarios); do
        key=$(profile_key "$scenario")
        [[ -n "$key" ]] || continue
        stem=$(profile_stem "${key#* }")
        recipe "$stem" || die "$scenario: its profile ${key#* } has no calibration recipe for stem \`$stem\` in scripts/gpu_validate.sh (add one to recipe())"
        if [[ -z "${calibrated[$stem]:-}" ]]; then
            calibrated[$stem]=1
            stems+=("$stem")
        fi
    done
    for stem in "${stems[@]}"; do
        recipe "$stem"
        step "device: calibrate $stem on the $backend backend -> $profiles_dir/${device}_$stem.json"
        run_logged "calibrate $stem" "$logs/calibrate-$stem.log" \
            "$bin/expertsim-calibrate" --backend "$backend" "${RECIPE[@]}" \
            --output "$profiles_dir/${device}_$stem.json" || true
    done

    # 4. Every live scenario, --runs times.
    local i name profile_arg dir_name sets
    for scenario in $(live_scenarios); do
        name=$(basename "$scenario" .toml)
        sets=()
        key=$(profile_key "$scenario")
        if [[ -n "$key" ]]; then
            table=${key%% *}
            stem=$(profile_stem "${key#* }")
            if [[ "$backend" == cpu ]]; then
                # Under --out, which may lie anywhere: an absolute path.
                profile_arg="$profiles_dir/${device}_$stem.json"
                [[ "$profile_arg" == /* ]] || profile_arg="$PWD/$profile_arg"
            else
                profile_arg="../../$profiles_dir/${device}_$stem.json"
            fi
            if [[ "$table" == "-" ]]; then
                sets=(--set "profile=\"$profile_arg\"")
            else
                sets=(--set "$table.profile=\"$profile_arg\"")
            fi
        fi
        step "device: live $scenario on the $backend backend, $runs run(s), profile ${profile_arg:-named by the scenario}"
        for ((i = 1; i <= runs; i++)); do
            dir_name="$out/live/$name/run-$i"
            run_logged "live $name run $i" "$out/live/$name/run-$i.log" \
                "$bin/expertsim" live "$scenario" --backend "$backend" --out "$dir_name" "${sets[@]}" || true
        done
        profile_arg=""
    done

    if [[ "$backend" == cuda ]]; then
        step "device: the GPU's clocks after the runs (read-only)"
        show nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,pstate,temperature.gpu,power.draw --format=csv
        if ((!dry_run)); then
            {
                date -u +%Y-%m-%dT%H:%M:%SZ
                nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,pstate,temperature.gpu,power.draw --format=csv
            } | tee "$logs/nvidia-smi-after.csv"
        fi
    fi

    # 5. The fidelity table.
    local doc_args=(--doc docs/fidelity.md)
    [[ "$backend" == cpu ]] && doc_args=()
    step "device: the fidelity table from every fidelity.json -> $out/fidelity-table.md${doc_args:+ and docs/fidelity.md (between its gpu-fidelity-table markers)}"
    local smi_args=()
    [[ "$backend" == cuda ]] && smi_args=(--nvidia-smi "$logs/nvidia-smi-before.csv" --nvidia-smi-after "$logs/nvidia-smi-after.csv")
    local table_cmd=(python3 scripts/fidelity_table.py "${doc_args[@]}" --out "$out/fidelity-table.md"
        --manifest "$MANIFEST" "${smi_args[@]}")
    show "${table_cmd[@]}"
    printf '      --profile %s ... %s ...\n' "$profiles_dir/${device}_STEM.json" "$out/live/SCENARIO/run-N/fidelity.json"
    if ((!dry_run)); then
        shopt -s nullglob
        local reports=("$out"/live/*/run-*/fidelity.json) profile
        for profile in "$profiles_dir/${device}"_*.json; do
            table_cmd+=(--profile "$profile")
        done
        shopt -u nullglob
        if ((${#reports[@]})); then
            "${table_cmd[@]}" "${reports[@]}" || failures+=("fidelity table")
        else
            echo "no fidelity.json was written: no table" >&2
            failures+=("fidelity table")
        fi
    fi

    if [[ -n "$collect" ]]; then
        step "device: copy everything written into $collect (repository-relative paths)"
        local items=("$logs" "$out")
        [[ "$backend" == cuda ]] && items+=("$profiles_dir/${device}_STEM.json" docs/fidelity.md)
        show cp -R --parents "${items[@]}" "$collect/"
        if ((!dry_run)); then
            mkdir -p "$collect"
            shopt -s nullglob
            items=("$logs" "$out")
            [[ "$backend" == cuda ]] && items+=("$profiles_dir/${device}"_*.json docs/fidelity.md)
            shopt -u nullglob
            local item
            for item in "${items[@]}"; do
                item=${item#"$PWD"/}
                if [[ "$item" == /* ]]; then
                    cp -R "$item" "$collect/" # an --out outside the repository
                else
                    cp -R --parents "$item" "$collect/"
                fi
            done
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
    printf '\nFAILED steps (%d):\n' "${#failures[@]}" >&2
    printf '  %s\n' "${failures[@]}" >&2
    exit 1
fi
printf '\ngpu_validate: every step passed\n'
