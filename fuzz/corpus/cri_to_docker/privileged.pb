‰

priv
busybox:1.36sh-c"
sleep 1000J
tierprivR(
io.kubernetes.container.hashad01c60eZ
priv/0.logzzrelative.json—

privuid-privdefaultpriv#/var/log/pods/default_priv_uid-priv2
apppriv2
io.kubernetes.pod.namepriv:"
kubernetes.io/config.sourceapi