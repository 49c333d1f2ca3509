"""Storage, measured (issue 58): for the node's local scratch and each shared filesystem
the listing names or the host mounts (NFS, Lustre, Weka, GPFS, a FUSE bucket), sequential
write and read with the page cache out of the way (`sequential.py`), the small-file
open/read rate (`small_files.py`) and a torch checkpoint written, fsynced and read back
(`checkpoint.py`); which filesystems, and whether there is room (`mounts.py`); one run
bounded in time and space and always cleaned up (`suite.py`).
"""
