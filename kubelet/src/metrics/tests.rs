//! The registry's exposition: upstream's series names in both text formats.

use super::*;

#[test]
fn renders() {
    let m = Metrics::new("node-a");
    m.observe_relist(Duration::from_millis(20));
    m.runtime_operation("list_podsandbox", false);
    m.runtime_operation_took("run_podsandbox", false, Duration::from_millis(80));
    m.pod_seen("u1");
    m.pod_running("u1");
    m.pod_running("u1");
    m.observe_pod_worker("sync", Duration::from_millis(300));
    m.set_running(1, &[("running", 2)]);
    let t = m.render();
    assert!(t.contains("kubelet_running_pods 1"), "{t}");
    assert!(t.contains("kubelet_node_name{node=\"node-a\"} 1"), "{t}");
    assert!(
        t.contains("kubelet_pod_start_duration_seconds_count 1"),
        "observed once"
    );
    assert!(t.contains(
        "kubelet_runtime_operations_duration_seconds_count{operation_type=\"run_podsandbox\"} 1"
    ));
    assert!(t.contains("kubelet_pleg_relist_duration_seconds_count 1"));
    assert!(t.contains("kubelet_runtime_operations_total{operation_type=\"list_podsandbox\"} 1"));
    assert!(t.contains(
        "kubelet_pod_worker_duration_seconds_bucket{le=\"0.5\",operation_type=\"sync\"} 1"
    ) || t.contains(
        "kubelet_pod_worker_duration_seconds_bucket{operation_type=\"sync\",le=\"0.5\"} 1"
    ), "{t}");
    assert!(t.contains("kubelet_running_containers{container_state=\"running\"} 2"));
}
