#!/usr/bin/env python3
"""tests/ops: every metric that the Prometheus alert rules and the Grafana
dashboard in contrib/ query is one gpusysd serves.

check-metrics.py GPUSYSD RULES DASHBOARD

Starts GPUSYSD on a private runtime directory with metrics_listen on a free
port (127.0.0.1:0, the port read from its log) and an emulated GPU (so the
per-GPU families have samples), scrapes /metrics once, and checks each
gpusysd_* name in the rules and the dashboard's queries against the scrape:
a family the daemon declares (# TYPE), or a histogram's _bucket, _sum and
_count. A name in the rules that gpusysd renamed would make an alert that
never fires and a panel that stays empty; this fails instead.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

UUID = 'GPU-0a0a0a0a-1111-2222-3333-444444444444'


def scrape(gpusysd):
    with tempfile.TemporaryDirectory(prefix='gpusys-metrics.') as tmp:
        conf = os.path.join(tmp, 'gpusysd.conf')
        with open(conf, 'w') as f:
            f.write('pollers = 1\nworkers = 1\nmetrics_listen = 127.0.0.1:0\nemulated_gpus = %s\n' % UUID)
        log = open(os.path.join(tmp, 'log'), 'w+')
        d = subprocess.Popen([gpusysd, '--runtime-dir', os.path.join(tmp, 'run'), '--config', conf],
                             stdout=log, stderr=subprocess.STDOUT)
        try:
            port = None
            for _ in range(500):
                log.seek(0)
                m = re.search(r'http://127\.0\.0\.1:(\d+)/metrics', log.read())
                if m:
                    port = int(m.group(1))
                    break
                if d.poll() is not None:
                    break
                time.sleep(0.01)
            if not port:
                log.seek(0)
                sys.exit('gpusysd did not say where it serves metrics:\n' + log.read())
            with urllib.request.urlopen('http://127.0.0.1:%d/metrics' % port, timeout=5) as r:
                return r.read().decode()
        finally:
            d.send_signal(signal.SIGTERM)
            d.wait(timeout=10)


def served(text):
    """Family names (# TYPE) and the sample names of the scrape."""
    names = set(re.findall(r'^# TYPE (\w+) ', text, re.M))
    names |= set(re.findall(r'^(\w+)[{ ]', text, re.M))
    for m in re.finditer(r'^# TYPE (\w+) histogram', text, re.M):
        names |= {m.group(1) + s for s in ('_bucket', '_sum', '_count')}
    return names


def queried(rules, dashboard):
    exprs = [l for l in open(rules).read().splitlines() if not l.lstrip().startswith('#')]
    out = {}
    for n in re.findall(r'\bgpusysd_\w+', '\n'.join(exprs)):
        out.setdefault(n, os.path.basename(rules))

    def walk(o):
        if isinstance(o, dict):
            for k, v in o.items():
                if k in ('expr', 'definition') and isinstance(v, str):
                    yield v
                elif k == 'query' and isinstance(v, (str, dict)):
                    yield v if isinstance(v, str) else v.get('query', '')
                else:
                    yield from walk(v)
        elif isinstance(o, list):
            for v in o:
                yield from walk(v)
    for e in walk(json.load(open(dashboard))):
        for n in re.findall(r'\bgpusysd_\w+', e):
            out.setdefault(n, os.path.basename(dashboard))
    return out


def main():
    gpusysd, rules, dashboard = sys.argv[1:4]
    want = queried(rules, dashboard)
    have = served(scrape(gpusysd))
    missing = sorted(n for n in want if n not in have)
    for n in missing:
        print('%s queries %s, which gpusysd does not serve' % (want[n], n))
    print('%d metric names queried, %d served by gpusysd, %d missing' % (len(want), len(have), len(missing)))
    if len(want) < 5 or not any(n.startswith('gpusysd_') for n in have):
        print('too few names found: the check itself is broken')
        return 1
    return 1 if missing else 0


if __name__ == '__main__':
    sys.exit(main())
