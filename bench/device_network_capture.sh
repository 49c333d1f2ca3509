#!/usr/bin/env bash
# Issue 46: what a lent node says about its network, captured for the network fingerprint's
# fixtures (reads only). sysfs attributes of every network interface and RDMA device (the
# files the fingerprint reads, copied under their own paths, links written as text), the
# PCI devices they sit on, and the text of ibstat, ibv_devinfo, rdma link, fi_info, ip -br
# link, nvidia-smi topo -m and the loaded modules, where the tools exist. MAC addresses
# and IP addresses are not copied.
#
#   bash bench/device_network_capture.sh    # -> $OUT/network.tgz
set -u
out=${OUT:-$(mktemp -d)}
work=$(mktemp -d)
root=$work/sys
copy() {  # copy one sysfs file if readable, under its own path
  local f=$1
  [ -r "$f" ] && [ -f "$f" ] || return 0
  mkdir -p "$root$(dirname "$f")"
  timeout 2 cat "$f" > "$root$f" 2>/dev/null || rm -f "$root$f"
}
link() {  # record where a symlink points, as text in NAME.link
  local f=$1
  [ -L "$f" ] || return 0
  mkdir -p "$root$(dirname "$f")"
  readlink -f "$f" > "$root$f.link"
}
for dev in /sys/class/net/*; do
  link "$dev"; link "$dev/device"; link "$dev/device/driver"
  for a in type operstate speed duplex mtu carrier ifindex dev_id dev_port addr_assign_type \
           device/numa_node device/local_cpulist device/vendor device/device \
           device/subsystem_vendor device/subsystem_device device/current_link_speed \
           device/current_link_width device/max_link_speed device/max_link_width; do
    copy "$dev/$a"
  done
done
for dev in /sys/class/infiniband/*; do
  [ -e "$dev" ] || continue
  link "$dev"; link "$dev/device"; link "$dev/device/driver"
  for a in node_type node_guid fw_ver hca_type board_id device/numa_node device/vendor \
           device/device device/current_link_speed device/current_link_width; do
    copy "$dev/$a"
  done
  for port in "$dev"/ports/*; do
    for a in state phys_state rate link_layer lid; do copy "$port/$a"; done
  done
  for n in "$dev"/device/net/*; do [ -e "$n" ] && link "$n"; done
done
for gpu in /sys/bus/pci/drivers/nvidia/0000:*; do
  link "$gpu"; copy "$gpu/numa_node"; copy "$gpu/vendor"; copy "$gpu/device"; copy "$gpu/class"
done
mkdir -p "$work/text"
run() {  # name, command...: its output where the tool exists
  local name=$1; shift
  command -v "$1" >/dev/null 2>&1 || { echo "absent" > "$work/text/$name.absent"; return 0; }
  timeout 20 "$@" > "$work/text/$name.txt" 2> "$work/text/$name.err"
  echo $? > "$work/text/$name.rc"
}
run ibstat ibstat
run ibv_devinfo ibv_devinfo -v
run rdma_link rdma link show
run fi_info fi_info -l
run fi_info_efa fi_info -p efa -t FI_EP_RDM
run topo nvidia-smi topo -m
run lspci_net lspci -D -nn -d ::0200
run lspci_ib lspci -D -nn -d ::0207
run ip_link ip -br link
cat /proc/modules | awk '{print $1, $3, $4, $5}' > "$work/text/modules.txt"
ls /dev/infiniband > "$work/text/dev_infiniband.txt" 2>&1
uname -r > "$work/text/uname.txt"
# "Open Kernel Module" here is what DMA-BUF GPUDirect RDMA needs (agent/network/gdr.py)
[ -r /proc/driver/nvidia/version ] && cat /proc/driver/nvidia/version > "$work/text/nvidia_version.txt"
# MAC and IP addresses out of every text kept
sed -i -E 's/([0-9a-f]{2}:){5}[0-9a-f]{2}/xx:xx:xx:xx:xx:xx/gI; s/([0-9]{1,3}\.){3}[0-9]{1,3}/x.x.x.x/g' \
  "$work"/text/*.txt 2>/dev/null
tar -czf "$out/network.tgz" -C "$work" .
find "$work" -type f | sed "s|$work/||" | sort | head -200
cat "$work/text/ip_link.txt" "$work/text/topo.txt" 2>/dev/null
