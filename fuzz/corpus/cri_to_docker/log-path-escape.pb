

escape
busybox:1.36sh-c"
sleep 1000J
tierescapeR(
io.kubernetes.container.hashad01c60eZ../../../etc/cron.d/x¥

escape
uid-escapedefaultescape'/var/log/pods/default_escape_uid-escape2
appescape2 
io.kubernetes.pod.nameescape:"
kubernetes.io/config.sourceapi