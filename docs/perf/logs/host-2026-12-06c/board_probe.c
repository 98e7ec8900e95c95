/*
 * The oversubscribed small allreduce's structure without the library
 * (docs/perf/host.md, 2026-12-06, session 4): 4 processes, rank i bound to
 * CPU i % 2, each call writes its input into its slot, enters a barrier
 * (a count in its own cache line), yields while a rank is missing, then
 * sums the 4 slots in rank order. Mode 1 (tried, slower): the ranks of a
 * CPU gather first, their last arriver exchanges with the other CPU's.
 * Build: cc -O2 -o board_probe board_probe.c; run: ./board_probe MODE FLOATS
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <stdint.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define NR 4
typedef struct { volatile uint64_t bar; uint64_t sig[6]; float inl[2]; } __attribute__((aligned(64))) line_t;
typedef struct { line_t line[2]; char pad[4096-128]; float slot[2][512]; } __attribute__((aligned(4096))) region_t;
/* two-level: group block per (group, parity): header line + data of members */
typedef struct { volatile uint64_t cnt; char p0[56]; volatile uint64_t ready; uint64_t sig[6]; char p1[8]; volatile uint64_t done; char p2[56]; float data[NR][512]; float res[512]; } __attribute__((aligned(4096))) gblock_t;
int main(int argc,char**argv){
  int mode=atoi(argv[1]); int cnt=argc>2?atoi(argv[2]):2; long N=200000; int n=NR;
  region_t *R=mmap(0,sizeof(region_t)*NR,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);
  gblock_t *G=mmap(0,sizeof(gblock_t)*4,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);
  int r=0; for(int i=1;i<n;i++){ if(fork()==0){r=i;break;} }
  cpu_set_t m;CPU_ZERO(&m);CPU_SET(r%2,&m);sched_setaffinity(0,sizeof m,&m);
  float in[512],out[512]; for(int i=0;i<cnt;i++) in[i]=r+1;
  usleep(100000);
  double t0=0; 
  int g=r%2, gs=2, gi=r/2; /* group by home cpu */
  for(long k=1;k<=N+1000;k++){
    if(k==1001) t0=now();
    int par=k&1;
    if(mode==0){
      memcpy(R[r].slot[par],in,cnt*4);
      R[r].line[par].sig[0]=k; __atomic_store_n(&R[r].line[par].bar,k,__ATOMIC_RELEASE);
      int w=(r+1)%n;
      for(;;){ int ok=1; for(int j=0;j<n;j++){int q=(w+j)%n; if(__atomic_load_n(&R[q].line[par].bar,__ATOMIC_ACQUIRE)!=k||R[q].line[par].sig[0]!=k){ok=0;w=q;break;}} if(ok)break; sched_yield(); }
      for(int i=0;i<cnt;i++){float s=R[0].slot[par][i]; for(int q=1;q<n;q++) s+=R[q].slot[par][i]; out[i]=s;}
    } else {
      gblock_t *b=&G[g*2+par];
      memcpy(b->data[gi],in,cnt*4);
      uint64_t v=__atomic_add_fetch(&b->cnt,1,__ATOMIC_ACQ_REL);
      if(v%gs==0){ /* last: leader */
        b->sig[0]=k; __atomic_store_n(&b->ready,k,__ATOMIC_RELEASE);
        gblock_t *o=&G[(1-g)*2+par];
        while(__atomic_load_n(&o->ready,__ATOMIC_ACQUIRE)!=k) sched_yield();
        /* rank order: r0=g0[0], r1=g1[0], r2=g0[1], r3=g1[1] */
        gblock_t *b0=&G[0*2+par],*b1=&G[1*2+par];
        for(int i=0;i<cnt;i++){ out[i]=((b0->data[0][i]+b1->data[0][i])+b0->data[1][i])+b1->data[1][i]; b->res[i]=out[i]; }
        __atomic_store_n(&b->done,k,__ATOMIC_RELEASE);
      } else {
        while(__atomic_load_n(&b->done,__ATOMIC_ACQUIRE)!=k) sched_yield();
        memcpy(out,b->res,cnt*4);
      }
    }
    if(out[0]!=10.0f){fprintf(stderr,"bad %f\n",out[0]);exit(1);}
  }
  double t=now()-t0;
  if(r==0){ for(int i=1;i<n;i++) wait(0); printf("mode %d cnt %d: %.3f us/call\n",mode,cnt,t/N*1e6);} 
  return 0;
}
