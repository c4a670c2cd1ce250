#!/bin/sh
# Runs libvirtd as root in a mount namespace of its own, where libvirt's fixed system
# directories (/etc/libvirt, /run/libvirt, /var/lib/libvirt, /var/cache/libvirt,
# /var/log/libvirt) are folders under BASE, so that it shares nothing with the host's
# libvirt or another test run. Its socket is BASE/run/libvirt-sock. Usage: $0 BASE
# (run it under `unshare -m --propagation private`; tests/libvirt_host.py does).
set -eu
base=$1
for dir in etc run lib cache log; do mkdir -p "$base/$dir"; done
bind() { mkdir -p "$2" && mount --bind "$base/$1" "$2"; }
bind etc /etc/libvirt
bind run /run/libvirt
bind lib /var/lib/libvirt
bind cache /var/cache/libvirt
bind log /var/log/libvirt
exec libvirtd --pid-file "$base/run/libvirtd.pid"
