#!/usr/bin/env python3
"""conv_gflops.py - where a ResNet-50 engine's time goes, in the network: `kiln exec
--dumpProfile` medians of one run per conv, summed by class (stem; per stage conv1, conv2
(3x3), conv3, downsample), with each class's GFLOP/s counted as direct convolution (so
Winograd layers can exceed the machine's peak).

Usage: python3 bench/conv_gflops.py ENGINE [THREADS]   (engine built for input:1x3x224x224)
"""
import sys, subprocess, re, onnx, collections
from onnx import shape_inference
m=shape_inference.infer_shapes(onnx.load('build/zoo/resnet50.onnx'))
shp={}
for vi in list(m.graph.value_info)+list(m.graph.output)+list(m.graph.input):
    shp[vi.name]=[d.dim_value for d in vi.type.tensor_type.shape.dim]
init={i.name:list(i.dims) for i in m.graph.initializer}
fl={}
for n in m.graph.node:
    if n.op_type=='Conv':
        w=init[n.input[1]]; y=shp[n.output[0]]
        fl[n.name]=2*w[0]*w[1]*w[2]*w[3]*y[2]*y[3]
out=subprocess.run(['./build/kiln','exec','--loadEngine='+sys.argv[1],'--shapes=input:1x3x224x224',f'--threads={sys.argv[2] if len(sys.argv) > 2 else 1}','--iterations=40','--duration=0','--dumpProfile'],capture_output=True,text=True).stdout
k={}
for l in out.splitlines():
    mm=re.match(r'^\S+ \[I\]\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)$',l)
    if mm: k[mm.group(5)]=float(mm.group(3))
g=collections.defaultdict(lambda:[0,0])
for n,f in fl.items():
    if n not in k: continue
    key=n.split('.')[0]+('.'+n.split('.')[-1].rstrip('_1') if '.' in n else '')
    g[key][0]+=f; g[key][1]+=k[n]
for key,(f,ms) in g.items(): print(f'{key:20s} {ms:6.2f} ms {f/ms/1e6:6.1f} GFLOP/s')
print('total', k.get('Total'))
