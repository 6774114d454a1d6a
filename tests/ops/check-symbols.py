#!/usr/bin/env python3
"""tests/ops: libgpusys exports exactly what its installed headers declare.

check-symbols.py LIBGPUSYS.so INCLUDEDIR CC [--no-cuda] [--man LIBGPUSYS.3]

Declared: every function prototype (not static) that the C headers under
INCLUDEDIR/gpusys/ (and gpusys/device/, gpusys/emulator/) declare, as the compiler itself
lists them (gcc -aux-info over one file including them all), and every
extern variable they declare. Exported: the library's defined dynamic
symbols (nm -D). Each must be in the other: an export nobody declares is an
internal leaking out (gpusys_dev_fill, the CUDA loader...); a declaration
the library does not export is a link error waiting for the first user.
The .cuh headers are device code, inline: nothing of theirs is exported.
--no-cuda: a library built without cuda.h, which has no CUDA-only parts
(heap.h, copy.h: alloc_cuda.c, copy.c); their declarations may be missing.
--man: the manual libgpusys(3) names every exported symbol and every
declared one (issue 32: it said it was the reference of both APIs and never
named gpusys_memcpy_htod): a name in the text, not a family's wildcard.
"""
import os
import re
import subprocess
import sys
import tempfile


def exported(lib):
    out = subprocess.run(['nm', '-D', '--defined-only', lib], check=True, capture_output=True, text=True).stdout
    syms = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] != 'A':  # A: the version node itself
            syms.add(parts[2].split('@')[0])
    return syms


def declared(incdir, cc):
    headers = sorted(os.path.join(d, f) for d in (os.path.join(incdir, 'gpusys'), os.path.join(incdir, 'gpusys', 'device'),
                                                  os.path.join(incdir, 'gpusys', 'emulator'))
                     if os.path.isdir(d) for f in os.listdir(d) if f.endswith('.h'))
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, 'all.c')
        with open(src, 'w') as f:
            for h in headers:
                f.write('#include "%s"\n' % os.path.relpath(h, incdir))
        aux = os.path.join(tmp, 'aux.txt')
        subprocess.run([cc, '-std=c11', '-D_GNU_SOURCE', '-I', incdir, '-aux-info', aux, '-c', src,
                        '-o', os.path.join(tmp, 'all.o')], check=True)
        funcs = {}
        for line in open(aux):
            m = re.match(r'/\* (\S+):\d+:\w+ \*/ (.*)$', line)
            if not m or not os.path.realpath(m.group(1)).startswith(os.path.realpath(incdir)):
                continue
            decl = m.group(2)
            if decl.startswith('static '):
                continue  # inline helpers: compiled into the caller
            name = re.search(r'(\w+) \(', decl)
            if name:
                funcs[name.group(1)] = os.path.basename(m.group(1))
    variables = set()
    for h in headers:
        text = open(h).read()
        for m in re.finditer(r'^extern\s+(?:__thread\s+|_Thread_local\s+)?[\w\s\*]*?\b(gpusys_\w+)\s*(?:\[[^\]]*\])?;',
                             text, re.M):
            variables.add(m.group(1))
    return funcs, variables


CUDA_ONLY_HEADERS = {'heap.h', 'copy.h'}


def man_names(path):
    """The gpusys_* words of a roff page, font changes and escapes removed."""
    text = open(path, encoding='utf-8').read()
    text = re.sub(r'\\f[BIRP]|\\f\(..|\\&', '', text)
    return set(re.findall(r'\bgpusys_\w+', text))


def main():
    lib, incdir, cc = sys.argv[1:4]
    no_cuda = '--no-cuda' in sys.argv[4:]
    exp = exported(lib)
    funcs, variables = declared(incdir, cc)
    decl = set(funcs) | variables
    leaked = sorted(exp - decl)
    missing = sorted(decl - exp)
    if no_cuda:
        skipped = [s for s in missing if funcs.get(s) in CUDA_ONLY_HEADERS]
        missing = [s for s in missing if s not in skipped]
        print('built without cuda.h: %d functions of %s not expected' % (len(skipped), ', '.join(sorted(CUDA_ONLY_HEADERS))))
    print('%d symbols exported, %d functions and %d variables declared in %s/gpusys' %
          (len(exp), len(funcs), len(variables), incdir))
    for s in leaked:
        print('exported but declared in no installed header: %s' % s)
    for s in missing:
        print('declared in an installed header but not exported: %s' % s)
    if not funcs or not exp:
        print('nothing found: the check itself is broken')
        return 1
    undocumented = []
    if '--man' in sys.argv[4:]:
        man = sys.argv[sys.argv.index('--man') + 1]
        named = man_names(man)
        undocumented = sorted((exp | decl) - named)
        for s in undocumented:
            print('exported or declared but not in %s: %s' % (os.path.basename(man), s))
        print('%s names %d of the %d public symbols' % (os.path.basename(man), len((exp | decl) & named),
                                                       len(exp | decl)))
    return 1 if leaked or missing or undocumented else 0


if __name__ == '__main__':
    sys.exit(main())
