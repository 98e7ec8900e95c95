/*
 * The cache's rates on this VM (docs/perf/host.md, 2026-12-06 session 6):
 * one core reading a buffer of each size (AVX2 loads), and copying it with
 * plain AVX2 stores, best of 3 passes of 512 MiB each. Run one copy per
 * core at once for both cores (taskset -c 0 / -c 1).
 * Build: gcc -O2 -mavx2 -o l3probe l3probe.c
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  size_t max=64<<20; char*a=aligned_alloc(64,max); char*b=aligned_alloc(64,max); memset(a,1,max); memset(b,2,max);
  for(size_t s=256<<10;s<=max;s*=2){
    int reps=(int)((512<<20)/s); if(reps<4)reps=4;
    double best_r=0,best_c=0;
    for(int k=0;k<3;k++){
      __m256i acc=_mm256_setzero_si256();
      double t0=now();
      for(int r=0;r<reps;r++) for(size_t i=0;i<s;i+=64){acc=_mm256_add_epi32(acc,_mm256_load_si256((__m256i*)(a+i)));acc=_mm256_add_epi32(acc,_mm256_load_si256((__m256i*)(a+i+32)));}
      double t1=now(); volatile int sink=_mm256_extract_epi32(acc,0);(void)sink;
      double gr=(double)s*reps/(t1-t0)/1e9; if(gr>best_r)best_r=gr;
      t0=now();
      for(int r=0;r<reps;r++) for(size_t i=0;i<s;i+=64){__m256i x=_mm256_load_si256((__m256i*)(a+i)),y=_mm256_load_si256((__m256i*)(a+i+32));_mm256_store_si256((__m256i*)(b+i),x);_mm256_store_si256((__m256i*)(b+i+32),y);}
      t1=now(); double gc=(double)s*reps/(t1-t0)/1e9; if(gc>best_c)best_c=gc;
    }
    printf("%8zu KiB  read %6.1f GB/s  copy(plain) %6.1f GB/s\n",s>>10,best_r,best_c);
  }
}
