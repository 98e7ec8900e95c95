#!/usr/bin/env bash
# new (build-host) vs old (098c5eb, the CI clone's build) alternated
b=/work/main/build-host
for np in 4 8; do
  for run in 1 2 3 4 5; do
    for v in new old; do
      echo; echo "## $np ranks, $v, run $run"
      if [ $v = old ]; then export LD_LIBRARY_PATH=/tmp/ci1/main/build/src; else unset LD_LIBRARY_PATH; fi
      "$b/tools/compare_mpi.sh" -B "$b/tools" -np $np -b 8 -e 4K -f 2 -n 1000 -w 50
    done
  done
done
