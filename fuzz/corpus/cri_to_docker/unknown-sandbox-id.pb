
0123456789abcdefg

c
busybox:1.36sh-c"
sleep 1000J	
tiercR(
io.kubernetes.container.hashad01c60eZc/0.log¬

unknownuid-unknowndefaultunknown)/var/log/pods/default_unknown_uid-unknown2
appunknown2!
io.kubernetes.pod.nameunknown:"
kubernetes.io/config.sourceapi