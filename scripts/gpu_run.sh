#!/usr/bin/env bash
# Run zcc's GPU tests and benchmarks on a GPU host, from the binaries that
# scripts/gpu_pack.sh packed into .devcarry/ (or ZCC_CARRY=DIR).
#
#   scripts/gpu_run.sh PHASE...
#
# Phases (in the order given):
#   info       versions: GPUs, driver, CUDA, NCCL, topology
#   kernels    tests/gpu/test_gpu_kernels --check --quick (device kernels alone)
#   colls      test_gpu_colls --layout both (the collective matrix, exact checks)
#   colls-full test_gpu_colls --layout both --full
#   sanitize   compute-sanitizer memcheck and racecheck on test_gpu_colls --quick
#   python     the Python CUDA tests (tests/python/test_cuda.py) with the host's torch,
#              and the DDP example on both GPUs against torch's NCCL
#   python1    the same on one GPU (CUDA_VISIBLE_DEVICES=PYTHON1_GPU, default 0): test_cuda.py
#              with its 2 ranks sharing the GPU (exact CPU references; default transports
#              and ZCC_P2P_DISABLE=1, GPU shm), and the DDP example with 2 processes on it
#              against gloo on the same CUDA tensors (bitwise); /dev/shm left empty
#   ddp-overlap the DDP example on one GPU under ZCC_TRACE_FILE and the torch profiler, and
#              zcc_trace heatmap of both (host markers; GPU kernels from the profiler), into
#              ddp-trace.tgz
#   perf       allreduce_perf -g 2 8 B..PERF_MAX (default 8G) --compare nccl, eager and -G 20
#   perf-small allreduce -g 2 8 B..1 MiB --compare nccl, eager and -G 20
#   stamp-eager 8 B allreduce eagerly with the stamps off, into device memory and into
#              mapped pinned memory (the default), alternated STAMP_ROUNDS (4) times
#   ab         the carried build against .abcarry/libzcc-NAME.so.gz (other builds' libzcc.so.0),
#              alternated: 2 ranks on the GPU, 8 B..AB_MAX (64K), graphs and eager
#   push-sweep the push allreduce at ZCC_GPU_PUSH_BLOCKS in PUSH_BLOCKS (16 32 64 128), -G 10
#   share-push-sweep the push allreduce's block count with 2 ranks sharing the GPU (p2p), on
#              device and pinned host buffers (--buffers), 2 MiB..SHARE_MAX (default 256M)
#   perf-np    the same, one process per GPU (-np 2), eager
#   ce         the copy-engine allreduce forced (ZCC_ALGO=ce), checked, -g 2 and -np 2
#   perf-reg   allreduce on registered buffers (-R 1: zero copy) against NCCL
#   calib      each allreduce algorithm forced (ZCC_ALGO / ZCC_PROTO), -G 20, no NCCL
#   perf-colls the other collectives, 8 B..PERF_MAX (default 1G) --compare nccl
#   perf-big   allreduce 2 GiB..8 GiB in graphs, --compare nccl, no checks
#   perf-wheel allreduce_perf --compare nccl against the host's nvidia-nccl-cu13
#              Python wheel (ZCC_NCCL_LIB pointing at its libnccl.so.2)
# One GPU, several ranks on it (test_gpu_colls --ranks, allreduce_perf --share-gpus 1):
#   share      the matrix with 2, 3 and 4 ranks on the GPUs there are (threads layout),
#              default algorithms and ZCC_ALGO=ring and tree; 2 ranks in processes (quick);
#              send/receive and alltoall over the per-peer connectors
#              (ZCC_P2P_DIRECT_DISABLE=1: 3 ranks at every size, 2 and 4 with 4 KiB slots,
#              2 in processes); pre-multiplied reduce and reduce-scatter, every datatype,
#              3 ranks, default and ring, 1 MiB staging (several pieces)
#   plan       what a GPU communicator of 2 ranks on one GPU plans and runs: its
#              connections (via p2p, through the transport table), its plan and
#              decision table at creation (INFO TUNING), and the refusals:
#              ZCC_P2P_DISABLE=1 ZCC_SHM_DISABLE=1 (names the pair), ZCC_ALGO=hier, ZCC_PROTO=ll128 (name
#              what can run); ZCC_TOPO_MEASURE=1 on a GPU, and zcc_topo --measure-gpu (p2p, shm)
#   hostmem    pinned (cudaHostAlloc, cudaHostRegister) and managed buffers on a GPU
#              communicator of 2 ranks on one GPU, exact; pageable and freed refused
#   gshm       the shm transport for GPU communicators (ZCC_P2P_DISABLE=1: windows in
#              pinned shared memory mapped into the GPU): the matrix with 2 and 3 ranks
#              on one GPU in threads (default, ring, tree) and 2 in processes with 1000
#              graph replays, the log naming shm, /dev/shm left empty; then the
#              pinned-host ceilings (gpu_membw -m host) and allreduce over GPU shm,
#              each algorithm forced, 8 B..GSHM_MAX (default 256M), in graphs
#   wide       more ranks than the all-pairs kernels take on one GPU: 12 in threads over p2p,
#              10 over GPU shm (the matrix, exact, graph replays), ZCC_ALGO=push refused, and
#              9 ranks of one process with CUDA_DEVICE_MAX_CONNECTIONS=8 refused
#   gnet       the net transport for GPU communicators (ZCC_P2P_DISABLE=1 ZCC_SHM_DISABLE=1,
#              ZCC_NET_PLUGIN=socket: connectors moved by the proxy over TCP loopback): the
#              matrix with 2 and 3 ranks in threads (default and tree), 2 in processes with
#              1000 graph replays, the ib plug-in on the fake verbs provider, a dead peer, the
#              log naming net; allreduce over it against host communicators over net/socket
#   gate       the signature gate across two namespaces: mismatches GATE_ROUNDS (10) times
#              with ZCC_GPU_SIG_GATE 0 and 1 (outputs untouched with it), and its cost on
#              8 B..64 KiB allreduce across them (gate off/on alternated; GATE_PERF=0: not;
#              two processes time-sliced on the GPU: gnet-ns-mps measures it under MPS)
#   gnet-ns    tests/net/gpu_hosts.sh: two network namespaces on the one GPU (carried ip)
#   gnet-ns-mps its perf phase under an MPS server (two processes on one GPU at once), once per
#              setting in GNET_MPS_ENVS (VAR=value ..., default ZCC_GPU_SIGBOARD=1); the phases
#              GNET_MPS_PHASES (default GNET_NS_PHASES, else perf; hier-perf: ring against hier)
#   stamps     op stamps: GPU times (flight recorder, trace), a stuck kernel's ZCC_TIMEOUT, cost
#   stamps-verify  colls on p2p and GPU shm, the 3-rank shm allgather sweep with graphs, 3 times
#   measure-fit  the GPU link probe's fit: zcc_topo --measure-gpu and ZCC_TOPO_MEASURE=1, p2p and shm
#   sig-cost   8 B allreduce eager (-g 2 and -np 2, 2 ranks on the GPU), ZCC_GPU_SIGBOARD 0 and 1
#              alternated 3 times (the signature board's cost per call)
#   stamp-cost  8 B allreduce in graphs: ZCC_GPU_STAMPS 0, 2 (device memory), 1, alternated
#   trace-cost  8 B allreduce, eager and in graphs: recorder off, the default, ZCC_TRACE_FILE on,
#              alternated 3 times (the trace's host cost per GPU operation)
#   probe-san  memcheck: the 4 MiB push eagerly, and the link probe (ZCC_TOPO_MEASURE) with COLL logs
#   share-san  compute-sanitizer memcheck and racecheck, 2 ranks, ring and tree, quick;
#              send/receive, alltoall and reduce(-scatter) with ZCC_P2P_DIRECT_DISABLE=1
#   push-check the push allreduce's correctness: the matrix over p2p (2, 3, 4 ranks, 2
#              processes) and GPU shm (2, 3 ranks, 2 processes with 1000 replays), test_gpu_hostmem
#              on both (pinned, mixed with device memory), the COLL line of a pinned input
#   gshm-more  GPU shm with 3 processes; compute-sanitizer memcheck and racecheck over shm
#              (default and ring); test_gpu_shm_limits (RLIMIT_MEMLOCK: creation fails naming it)
#   managed-perf allreduce on managed buffers (--buffers managed) against device buffers,
#              2 ranks on the GPU, in graphs and eager
#   gshm-sweep issue 12's targets over GPU shm: gpu_membw -m flag (flag round trip through
#              mapped host memory, kernel launch costs) and -m host (ceilings, "sm both":
#              both directions at once), allreduce at 8 B..64 KiB eager and in graphs,
#              then 4 MiB..GSHM_MAX with ZCC_GPU_PUSH_BLOCKS (GSHM_PUSH_BLOCKS),
#              ZCC_GPU_CHANNELS (GSHM_CHANNELS) and ZCC_GPU_CONN_BYTES (GSHM_CONN_BYTES) swept
#   pinned-perf allreduce on pinned host buffers (--buffers pinned), 2 ranks on the GPU,
#              each algorithm in PINNED_ALGOS, then over GPU shm, 8 B..GSHM_MAX in graphs
#   share-perf gpu_membw (the device-copy ceiling), then allreduce -g 2 --share-gpus 1
#              8 B..SHARE_MAX (default 1G) in graphs: default (push/LL), ring, tree
#   nccl       zcc's libnccl.so.2 (lib/nccl/ of the carry) on one GPU: its exports
#              against the host's libtorch_cuda.so imports (and the committed list),
#              nccl_gpu on both libraries compared bitwise, the shim's cost per call
#              (nccl_gpu --overhead, target 0.2 us), PyTorch's "nccl" backend on zcc
#              (tests/nccl/torch_nccl.py, LD_PRELOAD) and on NCCL compared bitwise,
#              and the DDP example with its reference on the "nccl" backend on zcc.
#              ZCC_NCCL_TORCH_NPROCS=2 ZCC_NCCL_TORCH_SHARE=1: two torch ranks on GPU 0
#              (once zcc allows several ranks per GPU; no NCCL reference then)
#   model      what the cost model is checked against on one GPU: allreduce over GPU shm
#              with MODEL_RANKS (default 3 4) ranks, the decision table (INFO TUNING) and each
#              algorithm forced (oneshot, oneshot/simple, twoshot, push, ring, tree), in
#              graphs; then broadcast, reduce, allgather and reduce-scatter with oneshot
#              and ring forced, 2 and 3 ranks over p2p and GPU shm (MODEL_COLL_MAX, 64M)
#   verify     this session's checks (2026-12-02c): the matrix over p2p (2-4 ranks, 2 processes:
#              registrations by pointer and IPC through the face) and GPU shm (3 ranks, 2
#              processes), the ring and tree kernels over rings out of rank order (ZCC_RINGS, p2p
#              and shm, threads and processes) and a bad ZCC_RINGS refused, ZCC_TOPO_MEASURE on
#              the GPU (p2p, shm), and the model's picks over GPU shm measured by default
#   verify2    after call 2's fixes: GPU shm matrices (2, 3 ranks threads, 2 processes) with
#              order-free inputs (the model picks the ring there), test_gpu_hostmem over shm,
#              ZCC_TOPO_MEASURE on the GPU (p2p 2 and 4 ranks, shm 2 and 3, 5 times each;
#              memcheck once)
#   measure    the ZCC_TOPO_MEASURE half of verify2 alone
#   nbinit     non-blocking init and its abort, the split init, the watchdog's link check,
#              the signature board: the quick matrix, graphs, errors, lifetime, abort, deadpeer,
#              mismatch over p2p (2 processes, 3 threads), GPU shm and net (2 processes); the
#              full matrix in 2 processes
#   leaks      lifetime, abort and stuck (and mismatch in processes), 2 ranks, threads over
#              p2p, GPU shm and net, processes over p2p and GPU shm: descriptors, threads,
#              pinned host memory (the driver's mappings) and /dev/shm/zcc-* unchanged
# Logs go to $OUT (default ./gpu_run_out), each into logs.tar as its run ends (a
# call cut short keeps what ran), gzipped at the end (GPU_RUN_TAR=0: left as
# they are); each run's line prints as it ends, the summary last (summary.txt).
# NVLink multicast stays off for every library (NCCL_NVLS_ENABLE=0 and friends).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
root=$(cd "$(dirname "$0")/.." && pwd)
carry=${ZCC_CARRY:-$root/.devcarry}
# Carried as one archive (scripts/gpu_pack.sh makes .devcarry.tgz): unpack it,
# every call (a warm device machine keeps the last call's .devcarry/, which
# would run the previous build's programs).
if [ -z "${ZCC_CARRY:-}" ] && [ -f "$root/.devcarry.tgz" ]; then
  rm -rf "$carry"
  tar xzf "$root/.devcarry.tgz" -C "$root"
fi
OUT=${OUT:-$PWD/gpu_run_out}
mkdir -p "$OUT"
bin=$carry/bin
export LD_LIBRARY_PATH=$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export ZCC_LIBRARY=$carry/lib/libzcc.so

# NCCL for --compare nccl and the kernel test: the system's, else the Python wheel's.
nccl_dir=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF; exit}' | xargs -r dirname)
if [ -z "$nccl_dir" ]; then
  nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(os.path.dirname(nvidia.nccl.__file__), "lib"))' 2>/dev/null || true)
fi
[ -n "$nccl_dir" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$nccl_dir

summary=()
note() { summary+=("$*"); }
run() { # NAME TIMEOUT CMD...
  local name=$1 to=$2
  shift 2
  local t0=$(date +%s)
  timeout "$to" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  note "$(printf '%-14s rc=%-3s %4ss  %s' "$name" "$rc" "$(( $(date +%s) - t0 ))" "$(tail -1 "$OUT/$name.log" | cut -c1-100)")"
  echo "${summary[-1]}"
  # Into the archive at once: a call cut short still brings back what ran.
  if [ "${GPU_RUN_TAR:-1}" = 1 ]; then
    tar rf "$OUT/logs.tar" -C "$OUT" "$name.log" && rm -f "$OUT/$name.log"
  fi
  return $rc
}

# expect_refusal NAME TEXT CMD...: the command must fail and print TEXT
expect_refusal() {
  local name=$1 text=$2
  shift 2
  run "$name" 120 bash -c '"$@"; rc=$?; echo "rc=$rc"; [ $rc -ne 0 ]' _ "$@"
  { [ -f "$OUT/$name.log" ] && cat "$OUT/$name.log" || tar xOf "$OUT/logs.tar" "$name.log"; } 2>/dev/null |
    grep -qF -- "$text" && note "$name: refusal says '$text'" || note "$name: MISSING '$text'"
}
# expect_line NAME TEXT CMD...: the command must pass and print TEXT
expect_line() {
  local name=$1 text=$2
  shift 2
  run "$name" 300 "$@"
  { [ -f "$OUT/$name.log" ] && cat "$OUT/$name.log" || tar xOf "$OUT/logs.tar" "$name.log"; } 2>/dev/null |
    grep -m2 -F -- "$text" > "$OUT/$name.line" && note "$name: says '$text': $(head -1 "$OUT/$name.line" | cut -c1-300)" ||
    note "$name: MISSING '$text'"
  rm -f "$OUT/$name.line"
}

for phase in "$@"; do
  case $phase in
  info)
    {
      echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
      echo "carry: $(cat "$carry/commit" 2>/dev/null | tr '\n' ' ')"
      nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
      nvidia-smi topo -m
      nvcc --version 2>/dev/null | tail -2
      echo "nccl: $nccl_dir"; ls "$nccl_dir" 2>/dev/null | grep nccl
      python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count(), "nccl", torch.cuda.nccl.version())' 2>&1
      which compute-sanitizer
      df -h /dev/shm; ulimit -l
      ldd "$bin/allreduce_perf" | grep -E "not found|zcc|hwloc|json"
    } > "$OUT/info.log" 2>&1
    cat "$OUT/info.log"
    ;;
  kernels) run kernels 600 "$bin/test_gpu_kernels" --check --quick ;;
  colls) run colls 900 "$bin/test_gpu_colls" --layout both ;;
  colls-full) run colls-full 1200 "$bin/test_gpu_colls" --layout both --full ;;
  sanitize)
    for tool in memcheck racecheck; do
      run "sanitize-$tool" ${SANITIZE_TIMEOUT:-300} compute-sanitizer --tool $tool --error-exitcode 9 \
        --target-processes all "$bin/test_gpu_colls" --quick --layout both --replays 20
    done
    ;;
  python)
    run python 600 python3 -m pytest -q -rs -p no:cacheprovider "$root/tests/python/test_cuda.py"
    run ddp-cuda 300 python3 "$root/examples/ddp_train.py" --device cuda --nprocs 2 --steps 200
    ;;
  python1)
    # One GPU (a host with more shows only PYTHON1_GPU): both ranks share it.
    one=(env CUDA_VISIBLE_DEVICES=${PYTHON1_GPU:-0} PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH})
    run python1 300 "${one[@]}" python3 -m pytest -q -rs -p no:cacheprovider "$root/tests/python/test_cuda.py"
    run ddp-cuda1 180 "${one[@]}" python3 "$root/examples/ddp_train.py" --device cuda --nprocs 2 --steps 200
    left=$(ls /dev/shm 2>/dev/null | grep -c zcc); note "python1: /dev/shm holds $left zcc segment(s) after the runs"
    ;;
  ddp-overlap)
    # The DDP example on one GPU (2 processes) under ZCC_TRACE_FILE and the torch profiler
    # (--profile), and zcc_trace heatmap on both: the overlap of its allreduces with compute.
    one=(env CUDA_VISIBLE_DEVICES=${PYTHON1_GPU:-0} PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH})
    tr=$OUT/ddp-trace
    rm -rf "$tr"; mkdir -p "$tr"
    run ddp-overlap 300 "${one[@]}" ZCC_TRACE_FILE="$tr/zcc.%p.json" python3 "$root/examples/ddp_train.py" \
      --device cuda --nprocs 2 --steps ${DDP_STEPS:-100} --profile "$tr"
    run ddp-heatmap-host 60 python3 "$root/tools/zcc_trace" heatmap "$tr"/zcc.*.json --json "$tr/host.json"
    run ddp-heatmap-torch 60 python3 "$root/tools/zcc_trace" heatmap "$tr"/zcc.*.json --torch "$tr"/torch.*.json \
      --json "$tr/torch.json"
    (cd "$OUT" && tar czf ddp-trace.tgz ddp-trace && rm -rf ddp-trace)
    ;;
  perf)
    e=${PERF_MAX:-8G}
    run allreduce-eager 900 "$bin/allreduce_perf" -b 8 -e $e -f 2 -g 2 -w 5 -n 20 -c 1 --compare nccl
    run allreduce-graph 900 "$bin/allreduce_perf" -b 8 -e $e -f 2 -g 2 -w 5 -c 0 -G 20 --compare nccl
    ;;
  ab)
    # A/B of the carried build against other builds in one call: each
    # .abcarry/libzcc-NAME.so.gz (another commit's libzcc.so.0, gzipped) and
    # this carry's own ("carry"), alternated AB_ROUNDS (3) times: 2 ranks on
    # the GPU, allreduce 8 B..AB_MAX (64K), in graphs (2000 replays) and
    # eagerly (2000 iterations; AB_EAGER=0: graphs only), out of place and in
    # place, no checks. AB_OFF=1 adds the carry with ZCC_GPU_STAMPS=0 ("off");
    # AB_ARGS adds allreduce_perf options (--buffers pinned).
    libs=(carry)
    [ "${AB_OFF:-0}" = 1 ] && libs+=(off)
    for g in "$root"/.abcarry/libzcc-*.so.gz; do
      [ -f "$g" ] || continue
      name=$(basename "$g" .so.gz); name=${name#libzcc-}
      mkdir -p "$OUT/ab-lib/$name"
      gunzip -c "$g" > "$OUT/ab-lib/$name/libzcc.so.0"
      libs+=("$name")
    done
    for i in $(seq 1 ${AB_ROUNDS:-3}); do
      for l in "${libs[@]}"; do
        lp=$LD_LIBRARY_PATH; stamps=1
        case $l in carry) ;; off) stamps=0 ;; *) lp=$OUT/ab-lib/$l:$LD_LIBRARY_PATH ;; esac
        ar=("$bin/allreduce_perf" -g 2 --share-gpus 1 -b 8 -e ${AB_MAX:-64K} -f 4 -c 0 ${AB_ARGS:-})
        run "ab-graph-$l-$i" 200 env LD_LIBRARY_PATH="$lp" ZCC_GPU_STAMPS=$stamps "${ar[@]}" -w 20 -G 2000
        [ "${AB_EAGER:-1}" = 1 ] || continue
        run "ab-eager-$l-$i" 200 env LD_LIBRARY_PATH="$lp" ZCC_GPU_STAMPS=$stamps "${ar[@]}" -w 200 -n 2000
      done
    done
    rm -rf "$OUT/ab-lib"
    ;;
  perf-small)
    # 8 B..1 MiB, eager and in graphs (-n 20 operations per graph, 20 replays).
    run small-eager 300 "$bin/allreduce_perf" -b 8 -e 1M -f 2 -g 2 -w 20 -n 50 -c 1 --compare nccl
    run small-graph 300 "$bin/allreduce_perf" -b 8 -e 1M -f 2 -g 2 -w 5 -n 20 -c 1 -G 20 --compare nccl
    ;;
  push-sweep)
    # The push allreduce's block count (ZCC_GPU_PUSH_BLOCKS), graphs, no NCCL.
    for pb in ${PUSH_BLOCKS:-16 32 64 128}; do
      run "push-b$pb" 300 env ZCC_GPU_PUSH_BLOCKS=$pb "$bin/allreduce_perf" -b 128K -e ${PERF_MAX:-1G} \
        -f 4 -g 2 -w 5 -n 20 -c 1 -G 10
    done
    ;;
  share-push-sweep)
    # The same with 2 ranks sharing the GPU over p2p, on device and on pinned host buffers
    # (0: the default for the window's memory).
    for pb in ${PUSH_BLOCKS:-0 16 32 66}; do
      for m in device pinned; do
        run "share-push-$m-b$pb" 300 env ZCC_GPU_PUSH_BLOCKS=$pb "$bin/allreduce_perf" -b 2M \
          -e ${SHARE_MAX:-256M} -f 2 -g 2 --share-gpus 1 --buffers $m -w 3 -n 10 -c 1 -G 5
      done
    done
    ;;
  perf-np)
    run allreduce-np2 600 "$bin/allreduce_perf" -b 8 -e ${PERF_MAX:-8G} -f 4 -np 2 -w 5 -n 20 -c 1 --compare nccl
    ;;
  calib)
    # Each algorithm forced, CUDA-graph replays, for the cost model's constants.
    for a in ll oneshot twoshot ce; do
      case $a in ll) v="ZCC_PROTO=ll"; e=64K ;; *) v="ZCC_ALGO=$a"; e=${PERF_MAX:-1G} ;; esac
      run "calib-$a" 600 env $v "$bin/allreduce_perf" -b 8 -e $e -f 4 -g 2 -w 5 -c 0 -G 20
    done
    ;;
  ce)
    # The copy-engine pipeline, forced, checked: it hung before kernels were preloaded.
    run ce-eager 150 env ZCC_ALGO=ce "$bin/allreduce_perf" -b 1M -e ${PERF_MAX:-1G} -f 4 -g 2 -w 3 -n 10 -c 1 --compare nccl
    run ce-np2 120 env ZCC_ALGO=ce "$bin/allreduce_perf" -b 1M -e ${PERF_MAX:-1G} -f 4 -np 2 -w 3 -n 10 -c 1
    ;;
  perf-reg)
    run allreduce-reg 600 "$bin/allreduce_perf" -b 8 -e ${PERF_MAX:-8G} -f 2 -g 2 -w 5 -n 20 -c 1 -R 1 --compare nccl
    ;;
  perf-colls)
    # COLLS_CHECK=0 skips the checks (faster); COLLS_TIMEOUT per collective.
    for c in broadcast reduce allgather reducescatter alltoall sendrecv; do
      run "$c" ${COLLS_TIMEOUT:-600} "$bin/${c}_perf" -b 8 -e ${PERF_MAX:-1G} -f 4 -g 2 -w 5 -n 20 \
        -c ${COLLS_CHECK:-1} --compare nccl
    done
    ;;
  perf-big)
    # 2 GiB to 8 GiB, in graphs (-n 5 operations per graph, 5 replays), no checks.
    run allreduce-big 300 "$bin/allreduce_perf" -b 2G -e 8G -f 2 -g 2 -w 2 -n 5 -c 0 -G 5 --compare nccl
    ;;
  perf-wheel)
    # The nvidia-nccl-cu13 wheel installed beside the host's torch (the newest
    # release, 343 MB unpacked, is over what a device call may carry).
    w=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(os.path.dirname(nvidia.nccl.__file__), "lib"))' 2>/dev/null)
    python3 -m pip show nvidia-nccl-cu13 2>/dev/null | grep -i '^version' > "$OUT/wheel-version.log"
    if [ -z "$w" ] || [ ! -f "$w/libnccl.so.2" ]; then note "perf-wheel: no nvidia-nccl-cu13 wheel here"; else
      ZCC_NCCL_LIB=$w/libnccl.so.2 run allreduce-wheel 900 "$bin/allreduce_perf" -b 8 -e 8G -f 2 -g 2 \
        -w 5 -n 20 -c 1 --compare nccl
    fi
    ;;
  share)
    for n in 2 3 4; do
      for a in default ring tree; do
        v=; [ $a = default ] || v="ZCC_ALGO=$a"
        run "share-n$n-$a" ${SHARE_TIMEOUT:-300} env $v "$bin/test_gpu_colls" --ranks $n --layout threads \
          ${SHARE_MODE:---quick}
      done
    done
    for a in default ring; do
      v=; [ $a = default ] || v="ZCC_ALGO=$a"
      run "share-procs-$a" ${SHARE_TIMEOUT:-300} env $v "$bin/test_gpu_colls" --ranks 2 --layout procs \
        --quick --only matrix,graphs --replays 100
    done
    # Send/receive and alltoall over the per-peer connectors: 3 ranks at every size
    # (1M+3 elements run through the 1 MiB FIFOs many times), 2 and 4 ranks with 4 KiB
    # slots (many wraps and short last slots at small sizes), 2 ranks in processes.
    p2pc="sendrecv_ring,sendrecv_pairs,sendrecv_mix,alltoall"
    run share-n3-p2pconn ${SHARE_TIMEOUT:-300} env ZCC_P2P_DIRECT_DISABLE=1 ZCC_TIMEOUT=20000 \
      "$bin/test_gpu_colls" --ranks 3 --layout threads --only matrix,graphs --coll $p2pc --replays 100
    for n in 2 4; do
      run "share-n$n-p2pconn-4k" ${SHARE_TIMEOUT:-300} env ZCC_P2P_DIRECT_DISABLE=1 ZCC_GPU_CONN_BYTES=16384 \
        ZCC_TIMEOUT=20000 "$bin/test_gpu_colls" --ranks $n --layout threads --quick --only matrix,graphs \
        --coll $p2pc --replays 100
    done
    run share-procs-p2pconn ${SHARE_TIMEOUT:-300} env ZCC_P2P_DIRECT_DISABLE=1 ZCC_TIMEOUT=20000 \
      "$bin/test_gpu_colls" --ranks 2 --layout procs --quick --only matrix --coll $p2pc
    # ... and that the variable took that path: zcc's COLL lines say "over connectors".
    run share-p2pconn-path 120 sh -c 'out=$(ZCC_P2P_DIRECT_DISABLE=1 ZCC_DEBUG=INFO ZCC_DEBUG_SUBSYS=COLL \
      ZCC_TIMEOUT=20000 "$1" --ranks 2 --layout threads --quick --only matrix \
      --coll sendrecv_pairs,alltoall 2>&1); echo "$out" | grep -m2 "over connectors";
      echo "$out" | tail -1; echo "$out" | tail -1 | grep -q " 0 failed" &&
      echo "$out" | grep -q "point-to-point op(s), .* over connectors" &&
      echo "$out" | grep -q "zccAlltoAll .* over connectors"' sh "$bin/test_gpu_colls"
    # Pre-multiplied sums in reduce and reduce-scatter (the quick runs above hold four
    # datatypes): every datatype, 3 ranks, staged one-shot and ring, in pieces.
    for a in default ring; do
      v=; [ $a = default ] || v="ZCC_ALGO=$a"
      run "share-n3-premul-$a" ${SHARE_TIMEOUT:-300} env $v ZCC_GPU_BUFFSIZE=1048576 ZCC_TIMEOUT=20000 \
        "$bin/test_gpu_colls" --ranks 3 --layout threads --only matrix --premul-only
    done
    ;;
  plan)
    run plan-tuning 180 env ZCC_DEBUG=INFO ZCC_DEBUG_SUBSYS=INIT,TUNING "$bin/allreduce_perf" \
      -b 8 -e 64M -f 8 -g 2 --share-gpus 1 -w 2 -n 5 -c 1
    run plan-measure 120 env ZCC_TOPO_MEASURE=1 ZCC_DEBUG=INFO ZCC_DEBUG_SUBSYS=TUNING \
      "$bin/allreduce_perf" -b 8 -e 8 -g 2 --share-gpus 1 -w 1 -n 1 -c 1
    expect_line plan-topo-measure "measured" "$bin/zcc_topo" --measure-gpu
    expect_line plan-topo-measure-shm "measured" env ZCC_P2P_DISABLE=1 "$bin/zcc_topo" --measure-gpu
    expect_refusal plan-p2p-off "no transport can connect GPU rank" env ZCC_P2P_DISABLE=1 ZCC_SHM_DISABLE=1 \
      "$bin/allreduce_perf" -b 8 -e 8 -g 2 --share-gpus 1 -w 0 -n 1
    expect_refusal plan-hier "ZCC_ALGO=hier" env ZCC_ALGO=hier \
      "$bin/allreduce_perf" -b 8 -e 8 -g 2 --share-gpus 1 -w 0 -n 1
    expect_refusal plan-ll128 "ZCC_PROTO=ll128" env ZCC_PROTO=ll128 \
      "$bin/allreduce_perf" -b 8 -e 8 -g 2 --share-gpus 1 -w 0 -n 1
    ;;
  hostmem) run hostmem 300 "$bin/test_gpu_hostmem" ;;
  gshm)
    export ZCC_TIMEOUT=${ZCC_TIMEOUT:-20000}
    for n in 2 3; do
      for a in default ring tree; do
        v=; [ $a = default ] || v="ZCC_ALGO=$a"
        run "gshm-n$n-$a" 300 env ZCC_P2P_DISABLE=1 $v "$bin/test_gpu_colls" --ranks $n \
          --layout threads --quick
      done
    done
    run gshm-hostmem 300 env ZCC_P2P_DISABLE=1 "$bin/test_gpu_hostmem"
    run gshm-procs 300 env ZCC_P2P_DISABLE=1 "$bin/test_gpu_colls" --ranks 2 --layout procs \
      --quick --only matrix,graphs --replays 1000
    run gshm-path 120 bash -c 'ZCC_P2P_DISABLE=1 ZCC_DEBUG=INFO ZCC_DEBUG_SUBSYS=INIT,SHM,TUNING \
      "$0" -b 8 -e 1M -f 32 -g 2 --share-gpus 1 -w 1 -n 2 -c 1 2>&1 | tee /dev/stderr | \
      grep -q "via shm" && echo "path: via shm"' "$bin/allreduce_perf"
    left=$(ls /dev/shm 2>/dev/null | grep -c zcc-gw); note "gshm: /dev/shm holds $left zcc-gw segment(s) after the runs"
    e=${GSHM_MAX:-256M}
    run gshm-membw 120 "$bin/gpu_membw" -m host -b 1M -e $e -n 20
    for a in default oneshot twoshot push ring tree; do
      v=; [ $a = default ] || v="ZCC_ALGO=$a"
      run "gshm-perf-$a" 300 env ZCC_P2P_DISABLE=1 $v "$bin/allreduce_perf" -b 8 -e $e -f 8 -g 2 \
        --share-gpus 1 -w 5 -n 20 -c 1 -G 10
    done
    ;;
  wide)
    # more ranks than the all-pairs kernels take (8) on one GPU, threads of one process:
    # WIDE_RANKS (12) over p2p, then 10 over GPU shm (ZCC_P2P_DISABLE=1): the matrix with exact
    # checks and graph replays, the connector kernels alone (the log says so); then a
    # forced all-pairs algorithm refused with the reason (test_gpu_colls and allreduce_perf set
    # CUDA_DEVICE_MAX_CONNECTIONS=32 for more than 8 ranks of one process). The errors part's
    # group of 130 sends and receives is refused over the connectors there, and over the
    # all-pairs p2p kernel by wide-group-n2; wide-one-rank: one rank's send/receive and
    # all-to-all over the connectors, one round a launch
    n=${WIDE_RANKS:-12}
    run wide-group-n2 200 "$bin/test_gpu_colls" --ranks 2 --layout threads --only errors
    for t in sendrecv alltoall; do
      run "wide-one-rank-$t" 120 env ZCC_P2P_DIRECT_DISABLE=1 ZCC_GPU_P2P_ROUNDS=1 \
        "$bin/${t}_perf" -b 8 -e 1M -f 32 -g 1 -w 1 -n 5 -c 1
    done
    expect_line "wide-p2p-n$n" "more than the all-pairs kernels take (8)" env ZCC_DEBUG=INFO \
      ZCC_DEBUG_SUBSYS=INIT "$bin/test_gpu_colls" --ranks $n --layout threads --quick \
      --only matrix,graphs,errors --replays 100
    expect_line "wide-shm-n10" "more than the all-pairs kernels take (8)" env ZCC_P2P_DISABLE=1 \
      ZCC_DEBUG=INFO ZCC_DEBUG_SUBSYS=INIT "$bin/test_gpu_colls" --ranks 10 --layout threads \
      --quick --only matrix,graphs --replays 100 --coll allreduce,allgather,alltoall,sendrecv_mix
    expect_refusal "wide-push" "of more than 8 ranks run the connector kernels: ring, tree, not push" \
      env ZCC_ALGO=push "$bin/allreduce_perf" -b 8 -e 8 -g 9 --share-gpus 1 -w 1 -n 1
    # more ranks of this process on the GPU than CUDA's stream queues: refused at init
    expect_refusal "wide-queues" "more than the 8 hardware queues CUDA gives its streams" \
      env CUDA_DEVICE_MAX_CONNECTIONS=8 "$bin/allreduce_perf" -b 8 -e 8 -g 9 --share-gpus 1 \
      -w 1 -n 1 ;;
  gnet)
    # GNET_RUNS picks some of: path n2 n2-tree n3 n3-tree procs ib deadpeer san perf (default all),
    # and ib-gdr san-gdr (GPUDirect RDMA on the fake verbs provider: 2 ranks as threads of one
    # process, the FIFOs in device memory; and under compute-sanitizer);
    # GNET_TO is each run's limit in seconds (default 400)
    export ZCC_TIMEOUT=${ZCC_TIMEOUT:-20000}
    nv=(ZCC_P2P_DISABLE=1 ZCC_SHM_DISABLE=1 ZCC_NET_PLUGIN=socket)
    to=${GNET_TO:-400}
    e=${GNET_MAX:-256M}
    for r in ${GNET_RUNS:-path n2 n2-tree n3 n3-tree procs ib deadpeer san perf}; do
      case $r in
      path)
        run gnet-path 120 bash -c 'env "${@:2}" ZCC_DEBUG=INFO ZCC_DEBUG_SUBSYS=INIT,NET,TUNING \
          "$1" -b 8 -e 1M -f 32 -g 2 --share-gpus 1 -w 1 -n 2 -c 1 2>&1 | tee /dev/stderr | \
          grep -q "via net" && echo "path: via net"' _ "$bin/allreduce_perf" "${nv[@]}" ;;
      n2) run gnet-n2 $to env "${nv[@]}" "$bin/test_gpu_colls" --ranks 2 --layout threads \
            --quick --only matrix,graphs,errors,lifetime,abort,stamps --replays 200 ;;
      n2-tree|n3|n3-tree)
        n=${r%%-*}; n=${n#n}; v=; [ "$r" = "${r%-tree}" ] || v=ZCC_ALGO=tree
        run "gnet-$r" $to env "${nv[@]}" $v "$bin/test_gpu_colls" --ranks $n --layout threads \
          --quick --only matrix,graphs --replays 200 ;;
      procs) run gnet-procs $to env "${nv[@]}" "$bin/test_gpu_colls" --ranks 2 --layout procs \
            --quick --only matrix,graphs --replays 1000 ;;
      ib) run gnet-ib $to env ZCC_P2P_DISABLE=1 ZCC_SHM_DISABLE=1 ZCC_NET_PLUGIN=ib \
            ZCC_IBV_LIBRARY="$carry/lib/libzcc_fakeverbs.so" "$bin/test_gpu_colls" --ranks 2 \
            --layout procs --quick --only matrix,graphs --replays 200 ;;
      ib-gdr) run gnet-ib-gdr $to env ZCC_P2P_DISABLE=1 ZCC_SHM_DISABLE=1 ZCC_NET_PLUGIN=ib \
            ZCC_IBV_LIBRARY="$carry/lib/libzcc_fakeverbs.so" ZCC_NET_GDR_LEVEL=SYS ZCC_DEBUG=INFO \
            ZCC_DEBUG_SUBSYS=NET "$bin/test_gpu_colls" --ranks 2 --layout threads --quick \
            --only matrix,graphs,errors,lifetime,abort --replays 200 ;;
      san-gdr) # SAN_GDR: settings to run memcheck under, in turn (default: host staging on the
           # same fake), then racecheck with GPUDirect RDMA. Memcheck with GPUDirect RDMA on the
           # fake (SAN_GDR=ZCC_NET_GDR_READ=1 or =0) reports no error but does not finish: one
           # of the fake's copies into device memory (its "DMA", a CUDA copy from its own
           # thread) waited 20 s, until the timeout stopped the kernels, on 2026-12-05
           # (docs/perf/net.md); a NIC's DMA is no CUDA call
           for v in ${SAN_GDR:-ZCC_NET_GDR_LEVEL=LOC} racecheck; do
             tool=memcheck; e=$v; [ "$v" = racecheck ] && tool=racecheck e=ZCC_NET_GDR_READ=1
             run "gnet-san-gdr-$tool-${e//[^A-Za-z0-9]/_}" ${SANITIZE_TIMEOUT:-150} env \
               ZCC_P2P_DISABLE=1 ZCC_SHM_DISABLE=1 ZCC_NET_PLUGIN=ib ZCC_NET_GDR_LEVEL=SYS "$e" \
               ZCC_IBV_LIBRARY="$carry/lib/libzcc_fakeverbs.so" compute-sanitizer \
               --tool $tool --error-exitcode 9 "$bin/test_gpu_colls" --ranks 2 --layout threads \
               --quick --only matrix --coll allreduce,allgather,sendrecv_ring
           done ;;
      perf-gdr) # allreduce over fake ib, 2 ranks as threads of one process: host staging
           # (ZCC_NET_GDR_LEVEL=LOC) against GPUDirect RDMA (SYS), in turn
           for g in LOC SYS; do
             run "gnet-perf-gdr-$g" 200 env ZCC_P2P_DISABLE=1 ZCC_SHM_DISABLE=1 ZCC_NET_PLUGIN=ib \
               ZCC_IBV_LIBRARY="$carry/lib/libzcc_fakeverbs.so" ZCC_NET_GDR_LEVEL=$g \
               "$bin/allreduce_perf" -b 8 -e ${GNET_GDR_MAX:-64M} -f 4 -g 2 --share-gpus 1 -w 5 \
               -n 20 -c 1
           done ;;
      deadpeer) run gnet-deadpeer 120 env "${nv[@]}" "$bin/test_gpu_colls" --ranks 2 \
            --layout procs --only deadpeer ;;
      san) for tool in memcheck racecheck; do
             run "gnet-san-$tool" ${SANITIZE_TIMEOUT:-150} env "${nv[@]}" compute-sanitizer \
               --tool $tool --error-exitcode 9 "$bin/test_gpu_colls" --ranks 2 --layout threads \
               --quick --only matrix --coll allreduce,allgather,sendrecv_ring
           done ;;
      perf)
        run gnet-perf-gpu 300 env "${nv[@]}" "$bin/allreduce_perf" -b 8 -e $e -f 4 -g 2 \
          --share-gpus 1 -w 5 -n 20 -c 1
        run gnet-perf-host 300 env ZCC_DEVICE=host ZCC_SHM_DISABLE=1 ZCC_NET_PLUGIN=socket \
          "$bin/allreduce_perf" -b 8 -e $e -f 4 -np 2 -w 5 -n 20 -c 1 ;;
      *) note "gnet: no run $r" ;;
      esac
    done
    ;;
  nbinit)
    # 2026-12-03's host changes on the GPU: the init split in two (every GPU
    # communicator), non-blocking init (procs: each rank's communicator through
    # blocking = 0, after one aborted with its peer missing), the watchdog's
    # bootstrap link check, the GPU shm "segment gone" error; over p2p, GPU shm
    # and net.
    export ZCC_TIMEOUT=${ZCC_TIMEOUT:-20000}
    run nb-p2p-procs 300 "$bin/test_gpu_colls" --ranks 2 --layout procs --quick \
      --only matrix,graphs,errors,lifetime,abort,deadpeer,mismatch --replays 200
    run nb-p2p-n3 300 "$bin/test_gpu_colls" --ranks 3 --layout threads --quick \
      --only matrix,graphs,errors,lifetime,abort,stamps --replays 100
    run nb-shm-procs 300 env ZCC_P2P_DISABLE=1 "$bin/test_gpu_colls" --ranks 2 --layout procs \
      --quick --only matrix,graphs,abort,deadpeer,mismatch --replays 200
    run nb-net-procs 300 env ZCC_P2P_DISABLE=1 ZCC_SHM_DISABLE=1 ZCC_NET_PLUGIN=socket \
      "$bin/test_gpu_colls" --ranks 2 --layout procs --quick --only matrix,abort,deadpeer,mismatch
    # the signature board under the full matrix (no false mismatch), 2 processes
    run nb-p2p-procs-full 400 "$bin/test_gpu_colls" --ranks 2 --layout procs --only matrix
    left=$(ls /dev/shm 2>/dev/null | grep -c zcc); note "nbinit: /dev/shm holds $left zcc segment(s) after the runs"
    ;;
  leaks)
    # The fault parts (abort, stuck, and mismatch in processes) and the 20
    # init/destroy cycles leave descriptors, threads, pinned host memory
    # (the driver's mappings) and /dev/shm/zcc-* as they were: threads
    # over p2p, GPU shm and net; processes over p2p and GPU shm (nbinit runs
    # processes over net).
    export ZCC_TIMEOUT=3000
    nv=(ZCC_P2P_DISABLE=1 ZCC_SHM_DISABLE=1 ZCC_NET_PLUGIN=socket)
    run leaks-p2p-threads 200 "$bin/test_gpu_colls" --ranks 2 --layout threads \
      --only lifetime,abort,stuck
    run leaks-shm-threads 200 env ZCC_P2P_DISABLE=1 "$bin/test_gpu_colls" --ranks 2 \
      --layout threads --only lifetime,abort,stuck
    run leaks-net-threads 200 env "${nv[@]}" "$bin/test_gpu_colls" --ranks 2 --layout threads \
      --only lifetime,abort,stuck
    run leaks-p2p-procs 200 "$bin/test_gpu_colls" --ranks 2 --layout procs \
      --only lifetime,abort,stuck,mismatch
    run leaks-shm-procs 200 env ZCC_P2P_DISABLE=1 "$bin/test_gpu_colls" --ranks 2 \
      --layout procs --only lifetime,abort,stuck,mismatch
    left=$(ls /dev/shm 2>/dev/null | grep -c zcc); note "leaks: /dev/shm holds $left zcc segment(s) after the runs"
    unset ZCC_TIMEOUT
    ;;
  gnet-ns-mps)
    # Two processes on one GPU are time-sliced by the driver (a kernel that
    # waits for the other process's runs ~2 ms at a time): the namespaces'
    # perf phase again under an MPS server of this run's own, which lets
    # both processes' kernels run at once; the server quits after it.
    command -v ip >/dev/null || export PATH=$carry/iproute:$PATH
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/zcc-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/zcc-mps-log
    mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
    if nvidia-cuda-mps-control -d; then
      note "gnet-ns-mps: MPS server started"
      # GNET_MPS_ENVS: settings (VAR=value, one per run) to run it with, in turn,
      # e.g. the signature gate's cost across the namespaces:
      # "ZCC_GPU_SIG_GATE=0 ZCC_GPU_SIG_GATE=1 ZCC_GPU_SIG_GATE=0 ZCC_GPU_SIG_GATE=1"
      k=0
      for e in ${GNET_MPS_ENVS:-ZCC_GPU_SIGBOARD=1}; do
        k=$((k + 1))
        tag=$(printf '%s' "$e" | tr -c 'A-Za-z0-9=\n' '_' | tr '=' '-')
        run "gnet-ns-mps-$k-$tag" 600 env "$e" bash "$root/tests/net/gpu_hosts.sh" \
          "$bin" "$carry/lib" "$OUT/gnet-ns-mps/$k-$tag" ${GNET_MPS_PHASES:-${GNET_NS_PHASES:-perf}}
      done
      echo quit | nvidia-cuda-mps-control
      tar czf "$OUT/gnet-ns-mps.tgz" -C "$OUT" gnet-ns-mps && rm -rf "$OUT/gnet-ns-mps"
    else
      note "gnet-ns-mps: no MPS server could start"
    fi
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    ;;
  gate)
    # The kernels' signature gate across the namespaces (sigboard.h): the mismatch part
    # GATE_ROUNDS times without the gate (its outputs may be written) and with it (never),
    # then allreduce 8 B..64 KiB across them with the gate off and on, alternated twice.
    command -v ip >/dev/null || export PATH=$carry/iproute:$PATH
    for on in 0 1; do
      run "gate-mismatch-$on" 900 env GPU_HOSTS_GATE=$on GPU_HOSTS_MISMATCH_ROUNDS=${GATE_ROUNDS:-10} \
        bash "$root/tests/net/gpu_hosts.sh" "$bin" "$carry/lib" "$OUT/gate-$on" mismatch
    done
    for i in $([ "${GATE_PERF:-1}" = 1 ] && echo 1 2); do
      for on in 0 1; do
        run "gate-perf-$on-$i" 600 env ZCC_GPU_SIG_GATE=$on GPU_HOSTS_MAX=64K \
          GPU_HOSTS_ITERS=${GATE_ITERS:-500} bash "$root/tests/net/gpu_hosts.sh" "$bin" \
          "$carry/lib" "$OUT/gate-perf-$on-$i" perf
      done
    done
    tar czf "$OUT/gate.tgz" -C "$OUT" $(cd "$OUT" && ls -d gate-* 2>/dev/null) && rm -rf "$OUT"/gate-*/
    ;;
  gnet-ns)
    command -v ip >/dev/null || export PATH=$carry/iproute:$PATH
    run gnet-ns 1500 bash "$root/tests/net/gpu_hosts.sh" "$bin" "$carry/lib" "$OUT/gnet-ns" \
      ${GNET_NS_PHASES:-}
    tar czf "$OUT/gnet-ns.tgz" -C "$OUT" gnet-ns && rm -rf "$OUT/gnet-ns"
    ;;
  model)
    export ZCC_TIMEOUT=${ZCC_TIMEOUT:-20000}
    for n in ${MODEL_RANKS:-3 4}; do
      ar=("$bin/allreduce_perf" -g $n --share-gpus 1 -c 1 -b 8 -e ${MODEL_MAX:-64M} -f 8 -w 3 -n 10 -G 5)
      run "model-shm-n$n-table" 120 env ZCC_P2P_DISABLE=1 ZCC_DEBUG=INFO ZCC_DEBUG_SUBSYS=TUNING \
        "${ar[@]}" -e 8
      for a in default oneshot oneshot/simple twoshot push ring tree; do
        v=; [ $a = default ] || v="ZCC_ALGO=${a%/*}"
        case $a in */*) v="$v ZCC_PROTO=${a#*/}" ;; esac
        run "model-shm-n$n-${a/\//-}" 300 env ZCC_P2P_DISABLE=1 $v "${ar[@]}"
      done
    done
    for tp in p2p shm; do
      v=; [ $tp = shm ] && v=ZCC_P2P_DISABLE=1
      for n in 2 3; do
        for c in broadcast reduce allgather reducescatter; do
          for a in oneshot ring; do
            run "model-$tp-n$n-$c-$a" 300 env $v ZCC_ALGO=$a "$bin/${c}_perf" -g $n --share-gpus 1 \
              -c 1 -b 8 -e ${MODEL_COLL_MAX:-64M} -f 8 -w 3 -n 10 -G 5
          done
        done
      done
    done
    ;;
  verify)
    export ZCC_TIMEOUT=${ZCC_TIMEOUT:-20000}
    tc="$bin/test_gpu_colls"
    for n in 2 3 4; do
      run "v-share-n$n" 300 "$tc" --ranks $n --layout threads --quick
    done
    run v-share-procs 300 "$tc" --ranks 2 --layout procs --quick --only matrix,graphs --replays 100
    run v-gshm-n3 300 env ZCC_P2P_DISABLE=1 "$tc" --ranks 3 --layout threads --quick
    run v-gshm-procs 300 env ZCC_P2P_DISABLE=1 "$tc" --ranks 2 --layout procs --quick \
      --only matrix,graphs --replays 100
    # rings out of rank order (on one GPU the plan has none: ZCC_RINGS sets them)
    r4="0 2 1 3|3 1 2 0|1 3 0 2"
    for a in ring tree; do
      run "v-rings-n4-$a" 300 env ZCC_ALGO=$a ZCC_RINGS="$r4" "$tc" --ranks 4 --layout threads --quick
    done
    run v-rings-gshm-n3 300 env ZCC_P2P_DISABLE=1 ZCC_ALGO=ring ZCC_RINGS="2 0 1|1 0 2" "$tc" --ranks 3 \
      --layout threads --quick
    run v-rings-procs 300 env ZCC_ALGO=ring ZCC_RINGS="1 0" "$tc" --ranks 2 --layout procs --quick \
      --only matrix,graphs --replays 100
    ar1=("$bin/allreduce_perf" -b 8 -e 8 --share-gpus 1 -w 1 -n 1 -c 1)
    expect_line v-rings-path "rings from ZCC_RINGS; channel 0: 3 1 2 0" env ZCC_RINGS="3 1 2 0|0 1 2 3" \
      ZCC_DEBUG=INFO ZCC_DEBUG_SUBSYS=TUNING "${ar1[@]}" -g 4
    expect_refusal v-rings-bad "ZCC_RINGS" env ZCC_RINGS="0 0" "${ar1[@]}" -g 2
    expect_line v-measure-p2p "measured on the GPU" env ZCC_TOPO_MEASURE=1 ZCC_DEBUG=INFO \
      ZCC_DEBUG_SUBSYS=TUNING "${ar1[@]}" -g 2
    expect_line v-measure-shm "measured on the GPU" env ZCC_P2P_DISABLE=1 ZCC_TOPO_MEASURE=1 \
      ZCC_DEBUG=INFO ZCC_DEBUG_SUBSYS=TUNING "${ar1[@]}" -g 3
    for n in 3 4; do
      run "v-model-shm-n$n" 300 env ZCC_P2P_DISABLE=1 "$bin/allreduce_perf" -g $n --share-gpus 1 -c 1 \
        -b 8 -e 64M -f 8 -w 3 -n 10 -G 5
    done
    for n in 2 3; do
      for c in broadcast reduce allgather reducescatter; do
        run "v-model-shm-n$n-$c" 300 env ZCC_P2P_DISABLE=1 "$bin/${c}_perf" -g $n --share-gpus 1 -c 1 \
          -b 8 -e 16M -f 8 -w 3 -n 10 -G 5
      done
    done
    left=$(ls /dev/shm 2>/dev/null | grep -c zcc-gw); note "verify: /dev/shm holds $left zcc-gw segment(s) after the runs"
    ;;
  verify2)
    export ZCC_TIMEOUT=${ZCC_TIMEOUT:-20000}
    tc="$bin/test_gpu_colls"
    for n in 2 3; do
      run "v2-gshm-n$n" 300 env ZCC_P2P_DISABLE=1 "$tc" --ranks $n --layout threads --quick
    done
    run v2-gshm-procs 300 env ZCC_P2P_DISABLE=1 "$tc" --ranks 2 --layout procs --quick \
      --only matrix,graphs --replays 100
    run v2-gshm-hostmem 300 env ZCC_P2P_DISABLE=1 "$bin/test_gpu_hostmem"
    ;&
  measure)
    ar1=("$bin/allreduce_perf" -b 8 -e 8 --share-gpus 1 -w 1 -n 1 -c 1)
    for i in 1 2 3 4 5; do
      expect_line "v2-measure-p2p2-$i" "measured on the GPU" env ZCC_TOPO_MEASURE=1 ZCC_DEBUG=INFO \
        ZCC_DEBUG_SUBSYS=TUNING "${ar1[@]}" -g 2
    done
    for i in 1 2 3; do
      expect_line "v2-measure-p2p4-$i" "measured on the GPU" env ZCC_TOPO_MEASURE=1 ZCC_DEBUG=INFO \
        ZCC_DEBUG_SUBSYS=TUNING "${ar1[@]}" -g 4
      expect_line "v2-measure-shm2-$i" "measured on the GPU" env ZCC_P2P_DISABLE=1 ZCC_TOPO_MEASURE=1 \
        ZCC_DEBUG=INFO ZCC_DEBUG_SUBSYS=TUNING "${ar1[@]}" -g 2
      expect_line "v2-measure-shm3-$i" "measured on the GPU" env ZCC_P2P_DISABLE=1 ZCC_TOPO_MEASURE=1 \
        ZCC_DEBUG=INFO ZCC_DEBUG_SUBSYS=TUNING "${ar1[@]}" -g 3
    done
    run v2-measure-procs 120 env ZCC_TOPO_MEASURE=1 ZCC_DEBUG=INFO ZCC_DEBUG_SUBSYS=TUNING \
      "$bin/allreduce_perf" -b 8 -e 1M -f 32 -np 2 --share-gpus 1 -w 1 -n 5 -c 1
    run v2-measure-memcheck ${MEASURE_SAN_TIMEOUT:-300} env ZCC_TOPO_MEASURE=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
      "${ar1[@]}" -g 2
    left=$(ls /dev/shm 2>/dev/null | grep -c zcc-gw); note "verify2: /dev/shm holds $left zcc-gw segment(s) after the runs"
    ;;
  stamps)
    # Op stamps: GPU times in the flight recorder and the trace, the watchdog's ZCC_TIMEOUT
    # for a kernel whose peer never comes (its dump names it), and what the stamps cost.
    # No exit stamps (device.h) by default, quiet exits (ZCC_GPU_STAMP_QUIET_US=20), then every
    # exit stamped (0): the times' order is checked on the ops that have an end.
    tc="$bin/test_gpu_colls"
    for q in -1 20 0; do
      run st-n2-q$q 300 env ZCC_GPU_STAMP_QUIET_US=$q ZCC_TIMEOUT=20000 "$tc" --ranks 2 \
        --layout both --only stamps
      run st-gshm-n3-q$q 300 env ZCC_GPU_STAMP_QUIET_US=$q ZCC_TIMEOUT=20000 ZCC_P2P_DISABLE=1 \
        "$tc" --ranks 3 --layout threads --only stamps
      run st-ring-n3-q$q 300 env ZCC_GPU_STAMP_QUIET_US=$q ZCC_TIMEOUT=20000 ZCC_ALGO=ring "$tc" \
        --ranks 3 --layout threads --only stamps
    done
    mkdir -p "$OUT/fr"
    run stuck-n2 300 env ZCC_TIMEOUT=3000 ZCC_FLIGHT_RECORDER_FILE="$OUT/fr/stuck.%p.%r.json" "$tc" \
      --ranks 2 --layout both --only stuck
    run stuck-gshm-n2 300 env ZCC_TIMEOUT=3000 ZCC_P2P_DISABLE=1 "$tc" --ranks 2 --layout both --only stuck
    run stuck-n4 300 env ZCC_TIMEOUT=3000 "$tc" --ranks 4 --layout threads --only stuck
    run st-trace 300 python3 "$root/tests/trace/test_trace.py" gpu --driver "$bin/allreduce_perf" \
      --tool "$root/tools/zcc_trace"
    expect_refusal st-quiet-bad "ZCC_GPU_STAMP_QUIET_US=51: expected -1 (no exit stamps) or 0 to 50" \
      env ZCC_GPU_STAMP_QUIET_US=51 "$bin/allreduce_perf" -g 2 --share-gpus 1 -b 8 -e 8 -w 1 -n 1
    # What they cost: stamps off (0), on without exit stamps (1, the default), with quiet
    # exits (1q20), with every exit stamped (1q0), alternated STAMP_ROUNDS (3) times
    for i in $(seq 1 ${STAMP_ROUNDS:-3}); do
      for on in 0 1 1q20 1q0; do
        e=(ZCC_GPU_STAMPS=${on%q*})
        case $on in *q*) e+=(ZCC_GPU_STAMP_QUIET_US=${on#*q}) ;; esac
        run "st-cost-eager-$on-$i" 120 env "${e[@]}" "$bin/allreduce_perf" -g 2 --share-gpus 1 \
          -b 8 -e 8 -w 200 -n 3000 -c 0
        run "st-cost-graph-$on-$i" 120 env "${e[@]}" "$bin/allreduce_perf" -g 2 --share-gpus 1 \
          -b 8 -e 8 -w 20 -G 2000 -c 0
      done
    done
    ;;
  stamps-verify)
    # After a change to the stamps: the matrix and graphs on p2p and GPU shm, threads and procs,
    # and the 3-rank GPU shm allgather sweep with graphs that once hung.
    export ZCC_TIMEOUT=${ZCC_TIMEOUT:-20000}
    tc="$bin/test_gpu_colls"
    for n in 2 3; do
      run "sv-share-n$n" 120 "$tc" --ranks $n --layout threads --quick
    done
    run sv-share-procs 120 "$tc" --ranks 2 --layout procs --quick --only matrix,graphs --replays 100
    run sv-gshm-n3 120 env ZCC_P2P_DISABLE=1 "$tc" --ranks 3 --layout threads --quick
    for i in 1 2 3; do
      run "sv-model-shm-n3-allgather-$i" 60 env ZCC_P2P_DISABLE=1 "$bin/allgather_perf" -g 3 --share-gpus 1 \
        -c 1 -b 8 -e 16M -f 8 -w 3 -n 10 -G 5
    done
    ;;
  measure-fit)
    # The GPU link probe's fit (zcc_select_fit_gpu) on p2p and GPU shm, through zcc_topo and a
    # communicator's creation.
    ar1=("$bin/allreduce_perf" -b 8 -e 8 --share-gpus 1 -w 1 -n 1 -c 1)
    expect_line mf-topo-p2p "measured" "$bin/zcc_topo" --measure-gpu
    expect_line mf-topo-shm "measured" env ZCC_P2P_DISABLE=1 "$bin/zcc_topo" --measure-gpu
    for g in 2 4; do
      expect_line "mf-p2p-$g" "measured on the GPU" env ZCC_TOPO_MEASURE=1 ZCC_DEBUG=INFO \
        ZCC_DEBUG_SUBSYS=TUNING "${ar1[@]}" -g $g
    done
    for g in 2 3; do
      expect_line "mf-shm-$g" "measured on the GPU" env ZCC_P2P_DISABLE=1 ZCC_TOPO_MEASURE=1 \
        ZCC_DEBUG=INFO ZCC_DEBUG_SUBSYS=TUNING "${ar1[@]}" -g $g
    done
    ;;
  trace-cost)
    mkdir -p "$OUT/tc"
    for i in 1 2 3; do
      for m in off default trace; do
        e=(); [ $m = off ] && e=(ZCC_FLIGHT_RECORDER_ENTRIES=0)
        [ $m = trace ] && e=(ZCC_TRACE_FILE="$OUT/tc/t.$i.%p.%r.json")
        run "tc-eager-$m-$i" 120 env "${e[@]}" "$bin/allreduce_perf" -g 2 --share-gpus 1 \
          -b 8 -e 8 -w 200 -n 3000 -c 0
        run "tc-graph-$m-$i" 120 env "${e[@]}" "$bin/allreduce_perf" -g 2 --share-gpus 1 \
          -b 8 -e 8 -w 20 -G 2000 -c 0
      done
      rm -f "$OUT"/tc/t.$i.*.json
    done
    ;;
  sig-cost)
    # The signature board's cost per GPU collective: 8 B allreduce, 2 ranks on the GPU,
    # eager (each call posts and compares) and in graphs (replays post nothing),
    # ZCC_GPU_SIGBOARD 0 and 1 alternated 3 times.
    for i in 1 2 3; do
      for m in 0 1; do
        run "sc-eager-$m-$i" 120 env ZCC_GPU_SIGBOARD=$m "$bin/allreduce_perf" -g 2 --share-gpus 1 \
          -b 8 -e 8 -w 200 -n 3000 -c 0
        run "sc-eager-np-$m-$i" 120 env ZCC_GPU_SIGBOARD=$m "$bin/allreduce_perf" -np 2 \
          --share-gpus 1 -b 8 -e 8 -w 200 -n 3000 -c 0
      done
    done
    ;;
  stamp-cost)
    # What the stamps cost on an 8 B allreduce in graph replays: off, into device memory, into
    # mapped pinned memory (the default), alternated.
    for i in 1 2 3; do
      for on in 0 2 1; do
        run "sc-graph-$on-$i" 60 env ZCC_GPU_STAMPS=$on "$bin/allreduce_perf" -g 2 --share-gpus 1 \
          -b 8 -e 8 -w 20 -G 2000 -c 0
      done
    done
    ;;
  stamp-eager)
    # Where the stamps' eager cost comes from (2026-12-06: 8 B eagerly 9.0-9.9 us with stamps
    # off against 12.2-15.8 on, in every round, while graphs differ by 0.07 us): off (0), into
    # device memory nobody reads (2), into mapped pinned memory (1, the default), alternated
    # STAMP_ROUNDS (4) times; eager launches, 2 ranks on the GPU in one thread
    for i in $(seq 1 ${STAMP_ROUNDS:-4}); do
      for on in 0 2 1; do
        run "se-eager-$on-$i" 60 env ZCC_GPU_STAMPS=$on "$bin/allreduce_perf" -g 2 --share-gpus 1 \
          -b 8 -e 8 -w 200 -n 3000 -c 0
      done
    done
    ;;
  probe-san)
    # The link probe under memcheck: is it the 4 MiB push (eager, no probe) or the probe's graphs?
    ar1=("$bin/allreduce_perf" --share-gpus 1 -w 1 -n 1 -c 1 -g 2)
    run probe-san-push4m ${PROBE_SAN_TIMEOUT:-100} compute-sanitizer --tool memcheck --error-exitcode 9 \
      "${ar1[@]}" -b 4M -e 4M
    run probe-san-measure ${PROBE_SAN_TIMEOUT:-100} env ZCC_TOPO_MEASURE=1 ZCC_DEBUG=INFO \
      ZCC_DEBUG_SUBSYS=INIT,COLL compute-sanitizer --tool memcheck --error-exitcode 9 "${ar1[@]}" -b 8 -e 8
    ;;
  share-san)
    for a in ring tree; do
      for tool in memcheck racecheck; do
        run "share-san-$a-$tool" ${SANITIZE_TIMEOUT:-300} env ZCC_ALGO=$a compute-sanitizer --tool $tool \
          --error-exitcode 9 --target-processes all "$bin/test_gpu_colls" --ranks 2 --layout threads \
          --quick --only matrix,graphs --replays 20
      done
    done
    # Send/receive and alltoall over the per-peer connectors, and the pre-multiplied cases.
    for tool in memcheck racecheck; do
      run "share-san-p2pconn-$tool" ${SANITIZE_TIMEOUT:-300} env ZCC_P2P_DIRECT_DISABLE=1 compute-sanitizer \
        --tool $tool --error-exitcode 9 --target-processes all "$bin/test_gpu_colls" --ranks 2 \
        --layout threads --quick --only matrix,graphs --coll sendrecv_mix,alltoall,reduce,reducescatter \
        --replays 20
    done
    ;;
  push-check)
    # The push allreduce after a change to it, exact: the matrix with 2, 3 and 4 ranks on
    # the GPU over p2p and 2 and 3 over GPU shm, 2 processes of each (graph replays), pinned
    # and mixed host buffers on both transports, and the COLL line of a pinned input.
    export ZCC_TIMEOUT=${ZCC_TIMEOUT:-20000}
    for n in 2 3 4; do
      run "pc-share-n$n" 300 "$bin/test_gpu_colls" --ranks $n --layout threads --quick
    done
    run pc-share-procs 300 "$bin/test_gpu_colls" --ranks 2 --layout procs --quick \
      --only matrix,graphs --replays 100
    for n in 2 3; do
      run "pc-gshm-n$n" 300 env ZCC_P2P_DISABLE=1 "$bin/test_gpu_colls" --ranks $n \
        --layout threads --quick
    done
    run pc-gshm-procs 300 env ZCC_P2P_DISABLE=1 "$bin/test_gpu_colls" --ranks 2 --layout procs \
      --quick --only matrix,graphs --replays 1000
    run pc-hostmem 300 "$bin/test_gpu_hostmem"
    run pc-gshm-hostmem 300 env ZCC_P2P_DISABLE=1 "$bin/test_gpu_hostmem"
    run pc-pinned-path 120 bash -c 'ZCC_DEBUG=INFO ZCC_DEBUG_SUBSYS=COLL "$0" -b 1M -e 1M -g 2 \
      --share-gpus 1 -w 1 -n 1 -c 1 --buffers pinned 2>&1 | grep -m1 "read once" && echo "path: read once"' \
      "$bin/allreduce_perf"
    left=$(ls /dev/shm 2>/dev/null | grep -c zcc-gw); note "push-check: /dev/shm holds $left zcc-gw segment(s) after the runs"
    ;;
  gshm-more)
    # The rest of issue 12's GPU shm checks: the matrix with 3 processes on the GPU, the
    # sanitizers over shm (default algorithms and the ring), and a window that cannot be
    # pinned (RLIMIT_MEMLOCK without CAP_IPC_LOCK: creation fails naming the limit).
    export ZCC_TIMEOUT=${ZCC_TIMEOUT:-20000}
    run gshm-procs3 300 env ZCC_P2P_DISABLE=1 "$bin/test_gpu_colls" --ranks 3 --layout procs \
      --quick --only matrix,graphs --replays 100
    for a in default ring; do
      v=; [ $a = default ] || v="ZCC_ALGO=$a"
      for tool in memcheck racecheck; do
        run "gshm-san-$a-$tool" ${SANITIZE_TIMEOUT:-150} env ZCC_P2P_DISABLE=1 $v compute-sanitizer \
          --tool $tool --error-exitcode 9 --target-processes all "$bin/test_gpu_colls" --ranks 2 \
          --layout threads --quick --only matrix --coll ${GSHM_SAN_COLLS:-allreduce,allgather,reducescatter}
      done
    done
    run gshm-limits 120 "$bin/test_gpu_shm_limits"
    ;;
  managed-perf)
    # Managed memory (cudaMallocManaged) as the allreduce's buffers, against device memory
    # in the same run: in graphs, and eager (the check rewrites the buffers from the host
    # before each size, so the driver moves their pages back and forth).
    ar=("$bin/allreduce_perf" -g 2 --share-gpus 1 -c 1 -b 8 -e ${GSHM_MAX:-256M} -f 8)
    for m in device managed; do
      run "managed-perf-$m" 300 "${ar[@]}" --buffers $m -w 3 -n 10 -G 5
      run "managed-perf-$m-eager" 300 "${ar[@]}" --buffers $m -w 3 -n 20
    done
    ;;
  gshm-sweep)
    # Issue 12's targets: the small-message costs (flag round trip through mapped
    # host memory, an empty kernel's launch), the pinned-host ceilings with both
    # directions at once, allreduce over GPU shm at 8 B (eager and in graphs),
    # and the large sizes with the push and ring kernels' knobs swept.
    e=${GSHM_MAX:-256M}
    run gshm-flag 120 "$bin/gpu_membw" -m flag -n 20
    run gshm-ceil 120 "$bin/gpu_membw" -m host -b 4M -e $e -n 20
    gs=(env ZCC_P2P_DISABLE=1)
    ar=("$bin/allreduce_perf" -g 2 --share-gpus 1 -c 1)
    run gshm-small-eager 120 "${gs[@]}" "${ar[@]}" -b 8 -e 64K -f 8 -w 50 -n 200
    run gshm-small-graph 120 "${gs[@]}" "${ar[@]}" -b 8 -e 64K -f 8 -w 5 -n 20 -G 20
    for pb in ${GSHM_PUSH_BLOCKS:-8 16 32 66}; do
      run "gshm-push-b$pb" 300 "${gs[@]}" ZCC_ALGO=push ZCC_GPU_PUSH_BLOCKS=$pb "${ar[@]}" \
        -b 4M -e $e -f 4 -w 3 -n 10 -G 5
    done
    for ch in ${GSHM_CHANNELS:-4 8 16 32}; do
      run "gshm-ring-c$ch" 300 "${gs[@]}" ZCC_ALGO=ring ZCC_GPU_CHANNELS=$ch "${ar[@]}" \
        -b 4M -e $e -f 4 -w 3 -n 10 -G 5
    done
    for cb in ${GSHM_CONN_BYTES:-262144 4194304}; do
      run "gshm-ring-cb$cb" 300 "${gs[@]}" ZCC_ALGO=ring ZCC_GPU_CONN_BYTES=$cb "${ar[@]}" \
        -b 4M -e $e -f 4 -w 3 -n 10 -G 5
    done
    run gshm-default 300 "${gs[@]}" "${ar[@]}" -b 4M -e $e -f 4 -w 3 -n 10 -G 5
    ;;
  pinned-perf)
    # Allreduce on pinned host buffers (allreduce_perf --buffers pinned: cudaHostAlloc,
    # mapped) between 2 ranks on the GPU, each algorithm; then over GPU shm too.
    e=${GSHM_MAX:-256M}
    ar=("$bin/allreduce_perf" -g 2 --share-gpus 1 -c 1 --buffers pinned)
    for a in ${PINNED_ALGOS:-default ring push oneshot}; do
      v=; [ $a = default ] || v="ZCC_ALGO=$a"
      run "pinned-perf-$a" 300 env $v "${ar[@]}" -b 8 -e $e -f 8 -w 3 -n 10 -G 5
    done
    run pinned-perf-gshm 300 env ZCC_P2P_DISABLE=1 "${ar[@]}" -b 8 -e $e -f 8 -w 3 -n 10 -G 5
    ;;
  share-perf)
    e=${SHARE_MAX:-1G}
    run share-membw 120 "$bin/gpu_membw" -b 1M -e $e -n 20
    for a in ${SHARE_ALGOS:-default ring tree}; do
      v=; [ $a = default ] || v="ZCC_ALGO=$a"
      run "share-perf-$a" 300 env $v "$bin/allreduce_perf" -b 8 -e $e -f 4 -g 2 --share-gpus 1 \
        -w 5 -n 20 -c 1 -G 10
    done
    ;;
  nccl)
    # PyTorch's wheels find libnccl.so.2 through libtorch_cuda.so's DT_RPATH, which
    # LD_LIBRARY_PATH cannot override: LD_PRELOAD puts zcc's library in first.
    shim=$carry/lib/nccl/libnccl.so.2
    real=$nccl_dir/libnccl.so.2
    tmp=$(mktemp -d)
    if [ ! -f "$shim" ]; then note "nccl: no $shim in the carry (scripts/gpu_pack.sh)"; else
      tl=$(python3 -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so"))' 2>/dev/null)
      if [ -f "$tl" ]; then
        nm -D --undefined-only "$tl" | awk '{print $2}' | grep -E '^nccl' | sort -u > "$tmp/torch-syms"
        cp "$tmp/torch-syms" "$OUT/nccl-torch-symbols.log"
        run nccl-exports 60 "$root/tests/nccl/check_exports.sh" "$shim" "$tmp/torch-syms"
        grep -v '^#' "$root/tests/nccl/torch-2.11-nccl-symbols.txt" > "$tmp/committed-syms"
        run nccl-symbols-list 10 diff "$tmp/committed-syms" "$tmp/torch-syms"
      else
        note "nccl: no libtorch_cuda.so found: export check skipped"
      fi
      run nccl-gpu-zcc 180 env LD_PRELOAD="$shim" NCCL_DEBUG=INFO "$bin/nccl_gpu" --dump "$tmp/zcc.bin"
      if [ -f "$real" ]; then
        run nccl-gpu-nccl 180 env LD_PRELOAD="$real" "$bin/nccl_gpu" --dump "$tmp/nccl.bin"
        run nccl-gpu-cmp 10 cmp "$tmp/zcc.bin" "$tmp/nccl.bin"
      else
        note "nccl: no real libnccl.so.2 found: bitwise comparison skipped"
      fi
      run nccl-overhead 180 env LD_PRELOAD="$shim" "$bin/nccl_gpu" --overhead
      run torch-nccl-zcc 600 env LD_PRELOAD="$shim" NCCL_DEBUG=INFO python3 "$root/tests/nccl/torch_nccl.py" \
        --expect zcc --dump "$tmp/torch-zcc.pt"
      # (the log is in logs.tar already, unless GPU_RUN_TAR=0)
      run torch-nccl-answered 5 sh -c 'if [ -f "$1/torch-nccl-zcc.log" ]; then cat "$1/torch-nccl-zcc.log";
        else tar xOf "$1/logs.tar" torch-nccl-zcc.log; fi | grep -m1 "answers as libnccl.so.2"' sh "$OUT"
      if [ "${ZCC_NCCL_TORCH_SHARE:-0}" != 1 ]; then
        run torch-nccl-ref 600 python3 "$root/tests/nccl/torch_nccl.py" --expect nccl --dump "$tmp/torch-nccl.pt"
        run torch-nccl-cmp 60 python3 "$root/tests/nccl/torch_nccl.py" --compare "$tmp/torch-zcc.pt" "$tmp/torch-nccl.pt"
      fi
      # The example's reference run uses torch's "nccl" backend: here that is zcc too.
      run ddp-nccl-zcc 300 env LD_PRELOAD="$shim" python3 "$root/examples/ddp_train.py" --device cuda \
        --reference nccl --nprocs "${ZCC_NCCL_TORCH_NPROCS:-1}" --steps 100
    fi
    rm -rf "$tmp"
    ;;
  *) echo "gpu_run: unknown phase $phase" >&2; exit 2 ;;
  esac
done
echo
echo "== summary (logs in $OUT)"
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
# The device tool returns at most 8 files: one archive of the logs.
if [ "${GPU_RUN_TAR:-1}" = 1 ]; then
  (cd "$OUT" && if ls ./*.log >/dev/null 2>&1; then tar rf logs.tar ./*.log && rm -f ./*.log; fi
   [ -f logs.tar ] && gzip -f logs.tar)
fi
