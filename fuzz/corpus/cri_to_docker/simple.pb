p

main
busybox:1.36sh-c"
sleep 1000J
tiermainR(
io.kubernetes.container.hashad01c60eZ
main/0.log¥

simple
uid-simpledefaultsimple'/var/log/pods/default_simple_uid-simple2 
io.kubernetes.pod.namesimple2
appsimple:"
kubernetes.io/config.sourceapi