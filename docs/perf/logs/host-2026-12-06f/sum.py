# Medians per state (fast: cross-read >= 30 GB/s) and environment of ab.sh output: python3 sum.py abN.txt
import sys,re,statistics as st
from collections import defaultdict
d=defaultdict(list)
for l in open(sys.argv[1]):
    m=re.match(r'(\S+) x=([\d.]*) (.*): (.*)',l.strip())
    if not m or not m.group(2): continue
    state='slow' if float(m.group(2))<30 else 'fast'
    vals=[tuple(map(float,v.split('/'))) for v in m.group(4).split()]
    d[(state,m.group(3))].append(vals)
for k in sorted(d):
    v=d[k]; n=len(v)
    cols=[]
    for i in range(len(v[0])):
        cols.append("%.2f/%.2f"%(st.median(x[i][0] for x in v),st.median(x[i][1] for x in v)))
    print(k[0],"%-45s n=%2d"%(k[1],n)," ".join(cols))
