g

c
busybox:1.36sh-c"
sleep 1000J	
tiercR(
io.kubernetes.container.hashad01c60eZc/0.log¾

under_scoreuid_xdefaultunder_score1/var/log/pods/default_under_score_uid-under_score2
appunder_score2%
io.kubernetes.pod.nameunder_score:"
kubernetes.io/config.sourceapi