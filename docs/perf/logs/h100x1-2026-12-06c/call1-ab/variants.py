import sys
name = sys.argv[1]
p = '/tmp/wt/src/device/flags.cuh'
s = open('/tmp/flags.cuh.orig').read()
enter_head = '''  zd_stamp_at a = {0, 0, (zcc_dev_live_t *)zd_pin((uint64_t)s.live), nullptr, 0};
  if (!a.live || !zd_stamper()) return a;'''
exit_head = '''  if (!a.live) return;
  __syncthreads();
  if (!zd_stamper()) return;
  uint64_t t = zd_globaltimer();
  if (a.quiet_ns && t < a.entry + a.quiet_ns) return;'''
assert enter_head in s and exit_head in s
if name == 'nostamp':
    s = s.replace(enter_head, '''  zd_stamp_at a = {0, 0, nullptr, nullptr, 0};
  (void)s;
  return a;''')
elif name == 'entryonly':
    s = s.replace(exit_head, '''  (void)a;
  if (blockDim.x > 0) return;
  uint64_t t = 0;''')
elif name == 'clk':
    s = s.replace('  uint64_t entry, token;', '  uint64_t entry, token, clk;')
    s = s.replace('  a.entry = t;', '  a.entry = t;\n  a.clk = clock64();')
    s = s.replace('{0, 0, (zcc_dev_live_t *)zd_pin((uint64_t)s.live), nullptr, 0}', '{0, 0, 0, (zcc_dev_live_t *)zd_pin((uint64_t)s.live), nullptr, 0}')
    s = s.replace(exit_head, '''  if (!a.live) return;
  __syncthreads();
  if (!zd_stamper()) return;
  if (a.quiet_ns && (uint64_t)clock64() - a.clk < 2ull * a.quiet_ns) return;
  uint64_t t = zd_globaltimer();''')
elif name == 'clknobar':
    s = s.replace('  uint64_t entry, token;', '  uint64_t entry, token, clk;')
    s = s.replace('  a.entry = t;', '  a.entry = t;\n  a.clk = clock64();')
    s = s.replace('{0, 0, (zcc_dev_live_t *)zd_pin((uint64_t)s.live), nullptr, 0}', '{0, 0, 0, (zcc_dev_live_t *)zd_pin((uint64_t)s.live), nullptr, 0}')
    s = s.replace(exit_head, '''  if (!a.live || !zd_stamper()) return;
  if (a.quiet_ns && (uint64_t)clock64() - a.clk < 2ull * a.quiet_ns) return;
  uint64_t t = zd_globaltimer();''')
else:
    raise SystemExit('unknown ' + name)
open(p, 'w').write(s)
