/*
 * Cross-core probe (docs/perf/host.md, 2026-12-06 session 7): 2 processes
 * pinned to CPUs 0 and 1 share a buffer of S KiB. In turn, one writes it
 * (plain AVX2 stores, or streaming ones with MODE 1; the lines were read by
 * the other CPU last: "write-after-peer-read"), re-reads it ("local
 * re-read"), and the other reads it ("cross-read"). Prints the medians per
 * REPORT seconds. On this VM cross-read reads 55-70 GB/s while the two CPUs
 * share a cache and 16-18 GB/s while they do not.
 * Build: gcc -O2 -mavx2 -o xcore xcore.c
 * Usage: ./xcore S_KIB SECONDS [REPORT_SECONDS [MODE]]
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void pin(int c){cpu_set_t s;CPU_ZERO(&s);CPU_SET(c,&s);sched_setaffinity(0,sizeof s,&s);}
static int NT=0;
static void wr(char*b,size_t s,int v){__m256i x=_mm256_set1_epi32(v);if(NT){for(size_t i=0;i<s;i+=64){_mm256_stream_si256((__m256i*)(b+i),x);_mm256_stream_si256((__m256i*)(b+i+32),x);}_mm_sfence();return;}for(size_t i=0;i<s;i+=64){_mm256_store_si256((__m256i*)(b+i),x);_mm256_store_si256((__m256i*)(b+i+32),x);}}
static int rd(char*b,size_t s){__m256i a=_mm256_setzero_si256();for(size_t i=0;i<s;i+=64){a=_mm256_add_epi32(a,_mm256_load_si256((__m256i*)(b+i)));a=_mm256_add_epi32(a,_mm256_load_si256((__m256i*)(b+i+32)));}return _mm256_extract_epi32(a,0);}
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  size_t S=(argc>1?atol(argv[1]):1024)<<10; double secs=argc>2?atof(argv[2]):10; double report=argc>3?atof(argv[3]):1.0; NT=argc>4?atoi(argv[4]):0;
  char*m=mmap(0,S+4096,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);
  atomic_long*turn=(atomic_long*)m; char*b=m+4096; memset(m,0,S+4096);
  pid_t pid=fork(); int me=pid==0; pin(me);
  double t0=now(),tl=t0; double xs[8192],ls[8192]; int nx=0,nl=0,nw=0; double ws[8192]; volatile int sink=0;
  for(long q=0;;q++){
    long step=2*q+ ( ((q&1)==me) ? 0 : 1 ); /* q even: core0 writes, core1 reads */
    long v; while((v=atomic_load_explicit(turn,memory_order_acquire))>=0 && v<step) _mm_pause();
    if(atomic_load(turn)<0) break;
    if((q&1)==me){ double w0=now(); wr(b,S,(int)q); double a=now(); if(nw<8192) ws[nw++]=S/(a-w0)/1e9; sink+=rd(b,S); double c=now(); if(nl<8192) ls[nl++]=S/(c-a)/1e9; }
    else { double a=now(); sink+=rd(b,S); double c=now(); if(nx<8192) xs[nx++]=S/(c-a)/1e9; }
    double t=now();
    if(me==0 && t-t0>secs){ atomic_store(turn,-1000000000L); }
    else atomic_store_explicit(turn,step+1,memory_order_release);
    if(t-tl>=report){ if(nx&&nl){qsort(xs,nx,sizeof(double),cmp);qsort(ls,nl,sizeof(double),cmp);
        printf("core%d t=%5.1fs n=%4d cross-read med %6.1f GB/s  local re-read med %6.1f GB/s  write-after-peer-read med %6.1f GB/s\n",me,t-t0,nx,xs[nx/2],ls[nl/2],(qsort(ws,nw,sizeof(double),cmp),ws[nw/2]));fflush(stdout);} nx=nl=nw=0; tl=t; }
    if(me==0 && t-t0>secs) break;
  }
  if(pid) wait(0);
  return 0;
}
