# The diagnostic device call of 2026-11-29 (call 12 in docs/perf/h200x2.md): the
# copy-engine hang, forced-algorithm sweeps for the cost model, a graph sweep.
# Run on the GPU host from the repo root with OUT set, after scripts/gpu_pack.sh.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=$PWD/.devcarry/lib
B=.devcarry/bin/allreduce_perf
t() { local n=$1 to=$2; shift 2; timeout $to "$@" > $OUT/$n.log 2>&1; echo "$n rc=$? $(grep -E '^ +[0-9]+ ' $OUT/$n.log | tail -1 | cut -c1-150)"; }
t d1 25 env ZCC_DEBUG=INFO ZCC_DEBUG_SUBSYS=COLL $B -b 64M -e 64M -g 2 -w 1 -n 2 -c 1
t d2 25 $B -b 64M -e 64M -g 2 -w 1 -n 2 -c 0
t d3 30 env ZCC_ALGO=ce $B -b 1M -e 64M -f 2 -g 2 -w 2 -n 5 -c 1
t big1s 60 env ZCC_ALGO=oneshot $B -b 64M -e 1G -f 2 -g 2 -w 3 -c 0 -G 10 --compare nccl
t cal-ll 30 env ZCC_PROTO=ll $B -b 8 -e 64K -f 4 -g 2 -w 5 -c 0 -G 20
t cal-1s 30 env ZCC_ALGO=oneshot $B -b 256K -e 32M -f 2 -g 2 -w 5 -c 0 -G 20
t cal-2s 30 env ZCC_ALGO=twoshot $B -b 256K -e 32M -f 2 -g 2 -w 5 -c 0 -G 20
t graph 60 $B -b 8 -e 32M -f 2 -g 2 -w 5 -c 0 -G 20 --compare nccl
grep -h "zccAllReduce" $OUT/d1.log | sort | uniq -c | head
tail -5 $OUT/d1.log
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
