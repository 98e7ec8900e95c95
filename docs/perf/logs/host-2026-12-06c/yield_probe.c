/*
 * Two processes on one CPU handing it back and forth with sched_yield:
 * the cost of a round trip (two context switches) on this VM.
 * Build: cc -O2 -o yield_probe yield_probe.c; run: ./yield_probe CPU
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  int cpu=argc>1?atoi(argv[1]):0; long N=200000;
  volatile long *sh=mmap(0,4096,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);
  cpu_set_t m;CPU_ZERO(&m);CPU_SET(cpu,&m);sched_setaffinity(0,sizeof m,&m);
  pid_t c=fork();
  int me=c==0;
  double t0=now();
  for(long i=0;i<N;i++){
    if(me==0){ sh[0]=i+1; while(sh[1]!=i+1) sched_yield(); }
    else { while(sh[0]!=i+1) sched_yield(); sh[1]=i+1; }
  }
  double t=now()-t0;
  if(c){waitpid(c,0,0);printf("round trip %.3f us\n",t/N*1e6);}
  return 0;
}
