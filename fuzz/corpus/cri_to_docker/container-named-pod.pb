m

POD
busybox:1.36sh-c"
sleep 1000J
tierPODR(
io.kubernetes.container.hashad01c60eZ	POD/0.log¬

podnameuid-podnamedefaultpodname)/var/log/pods/default_podname_uid-podname2!
io.kubernetes.pod.namepodname2
apppodname:"
kubernetes.io/config.sourceapi