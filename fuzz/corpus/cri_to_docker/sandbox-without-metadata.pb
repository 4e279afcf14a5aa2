g

c
busybox:1.36sh-c"
sleep 1000J	
tiercR(
io.kubernetes.container.hashad01c60eZc/0.log†nometa'/var/log/pods/default_nometa_uid-nometa2
appnometa2 
io.kubernetes.pod.namenometa:"
kubernetes.io/config.sourceapi