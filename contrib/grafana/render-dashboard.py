#!/usr/bin/env python3
"""Draw contrib/grafana/gpusysd.json's panels as a PNG, for docs/DASHBOARD.md.

render-dashboard.py GPUSYSD GPUSYS_BENCH OUT.png [SECONDS]

Not Grafana (none runs here): a real gpusysd (emulated GPU, metrics_listen
on a free port) is scraped every second by a real Prometheus (the
`prometheus` binary of Debian's package, on a private directory and port;
no service is started) while gpusys-bench puts emulated load on it (NOOP
round trips, printf, callbacks, file reads); then each panel's own query,
with $__rate_interval as 5s and $instance as .*, is evaluated by that
Prometheus (query_range) and drawn with matplotlib in the dashboard's
layout. The image says so in its title.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_for(pred, what, secs=15):
    t = time.time()
    while time.time() - t < secs:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    sys.exit('timed out waiting for ' + what)


def query_range(prom, expr, start, end):
    q = urllib.parse.urlencode({'query': expr, 'start': start, 'end': end, 'step': '1'})
    with urllib.request.urlopen('http://127.0.0.1:%d/api/v1/query_range?%s' % (prom, q), timeout=30) as r:
        return json.load(r)['data']['result']


def legend(fmt, labels):
    return re.sub(r'\{\{\s*(\w+)\s*\}\}', lambda m: labels.get(m.group(1), ''), fmt) or str(labels)


def main():
    gpusysd, bench, out = sys.argv[1:4]
    seconds = int(sys.argv[4]) if len(sys.argv) > 4 else 60
    dash = json.load(open(os.path.join(HERE, 'gpusysd.json')))
    tmp = tempfile.mkdtemp(prefix='gpusys-dash.')
    procs = []
    try:
        rt = os.path.join(tmp, 'run')
        conf = os.path.join(tmp, 'gpusysd.conf')
        open(conf, 'w').write('pollers = 1\nmetrics_listen = 127.0.0.1:0\nchannel_bulk_bytes = 64M\n'
                              'emulated_gpus = GPU-0a0a0a0a-1111-2222-3333-444444444444=emulated\n')
        log = open(os.path.join(tmp, 'gpusysd.log'), 'w+')
        procs.append(subprocess.Popen([gpusysd, '--runtime-dir', rt, '--config', conf], stdout=log,
                                      stderr=subprocess.STDOUT))

        def metrics_port():
            log.seek(0)
            m = re.search(r'http://127\.0\.0\.1:(\d+)/metrics', log.read())
            return int(m.group(1)) if m else None
        mport = wait_for(metrics_port, 'gpusysd metrics')
        prom = free_port()
        pconf = os.path.join(tmp, 'prometheus.yml')
        open(pconf, 'w').write('global: {scrape_interval: 1s, evaluation_interval: 1s}\n'
                               'scrape_configs:\n  - job_name: gpusysd\n'
                               '    static_configs: [{targets: ["127.0.0.1:%d"]}]\n' % mport)
        procs.append(subprocess.Popen(['prometheus', '--config.file', pconf, '--storage.tsdb.path',
                                       os.path.join(tmp, 'tsdb'), '--web.listen-address', '127.0.0.1:%d' % prom],
                                      stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, 'prom.log'), 'w')))

        def ready():
            try:
                return urllib.request.urlopen('http://127.0.0.1:%d/-/ready' % prom, timeout=1).status == 200
            except OSError:
                return False
        wait_for(ready, 'prometheus')
        start = time.time()
        time.sleep(5)  # idle first: the panels show the load arriving
        data = os.path.join(tmp, 'data')
        open(data, 'wb').write(os.urandom(1 << 20) * 32)
        loads = [
            [bench, 'rtt', '--emulate', '--runtime-dir', rt, '--iters', '3000'],
            [bench, 'print', '--emulate', '--runtime-dir', rt, '--out', os.path.join(tmp, 'print.out')],
            [bench, 'calls', '--emulate', '--runtime-dir', rt, '--iters', '2000'],
            [bench, 'file', '--emulate', '--runtime-dir', rt, '--size', str(32 << 20), '--dir', tmp, '--reps', '1',
             '--no-floors'],
        ]
        i = 0
        while time.time() - start < seconds - 5:
            subprocess.run(loads[i % len(loads)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
            i += 1
        time.sleep(5)  # idle again
        end = time.time()
        time.sleep(2)

        fig = plt.figure(figsize=(16, 13), dpi=90)
        fig.suptitle('gpusysd dashboard (contrib/grafana/gpusysd.json), not a Grafana screenshot: its panels\' '
                     'queries\nevaluated by Prometheus 2.42 over %d s of a test run (emulated warps: '
                     'gpusys-bench rtt/print/calls/file), drawn with matplotlib' % seconds, fontsize=11)
        rows = max(p['gridPos']['y'] + p['gridPos']['h'] for p in dash['panels'])
        gs = fig.add_gridspec(rows, 24, hspace=2.5, wspace=1.5, top=0.92, bottom=0.04, left=0.05, right=0.98)
        for p in dash['panels']:
            g = p['gridPos']
            ax = fig.add_subplot(gs[g['y']:g['y'] + g['h'], g['x']:g['x'] + g['w']])
            ax.set_title(p['title'], fontsize=9, loc='left')
            for t in p['targets']:
                expr = t['expr'].replace('$__rate_interval', '5s').replace('$instance', '.*')
                res = query_range(prom, expr, start, end)
                if p['type'] == 'stat':
                    v = float(res[0]['values'][-1][1]) if res else float('nan')
                    red = (p['title'] == 'Daemon up' and v < 1) or (p['title'] == 'GPUs failed' and v > 0)
                    ax.text(0.5, 0.4, '%g' % v, ha='center', va='center', fontsize=28,
                            color='white', transform=ax.transAxes)
                    ax.set_facecolor('#c4162a' if red else '#37872d')
                    ax.set_xticks([])
                    ax.set_yticks([])
                    continue
                for s in res:
                    xs = [float(x) - start for x, _ in s['values']]
                    ys = [float(y) for _, y in s['values']]
                    if len(res) > 6 and not any(y == y and y != 0 for y in ys):
                        continue  # an opcode never called (0, or NaN: no sample): left out of the legend
                    ax.plot(xs, ys, linewidth=1, label=legend(t.get('legendFormat', ''), s['metric']))
            if p['type'] != 'stat':
                unit = p['fieldConfig']['defaults'].get('unit', '')
                ax.set_ylabel({'reqps': 'req/s', 's': 'seconds', 'Bps': 'bytes/s'}.get(unit, ''), fontsize=8)
                ax.set_xlabel('seconds into the run', fontsize=8)
                ax.tick_params(labelsize=7)
                ax.grid(alpha=0.3)
                if ax.get_legend_handles_labels()[0]:
                    ax.legend(fontsize=6, ncol=3, loc='upper left')
                else:
                    ax.text(0.5, 0.5, 'no data (nothing of this kind happened)', ha='center', va='center',
                            fontsize=8, color='gray', transform=ax.transAxes)
        fig.savefig(out)
        print('wrote %s (%d load runs)' % (out, i))
    finally:
        for pr in reversed(procs):
            pr.send_signal(signal.SIGTERM)
            try:
                pr.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pr.kill()
        subprocess.run(['rm', '-rf', tmp])


if __name__ == '__main__':
    main()
