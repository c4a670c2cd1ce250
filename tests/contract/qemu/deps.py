import os,re,sys
M=sys.argv[1]
idx={}
for d,_,fs in os.walk(M):
    for f in fs:
        if f.endswith(".ko"): idx[f[:-3].replace("-","_")]=os.path.join(d,f)
def deps(name):
    data=open(idx[name],"rb").read()
    m=re.search(rb"depends=([^\x00]*)\x00",data)
    return [x.replace("-","_") for x in m.group(1).decode().split(",") if x] if m else []
order=[]
def visit(n):
    if n in order: return
    for d in deps(n): visit(d)
    order.append(n)
for n in sys.argv[2:]: visit(n.replace("-","_"))
for n in order: print(idx[n])
