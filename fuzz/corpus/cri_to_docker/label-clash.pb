š

clash
busybox:1.36sh-c"
sleep 1000J
io.kubernetes.sandbox.idxJ
annotation.xlabelR(
io.kubernetes.container.hashad01c60eZclash/0.logž

clash	uid-clashdefaultclash%/var/log/pods/default_clash_uid-clash2
appclash2
io.kubernetes.pod.nameclash:"
kubernetes.io/config.sourceapi