//! The phase names the controllers count in `kaos_resources` (`NAMES`) are the ones written into
//! `status.phase`: each enum's serialised form, in the order of its `ALL`.

use kaos_api::agent::AgentPhase;
use kaos_api::common::Phase;
use kaos_api::workflow::RunPhase;
use serde::Serialize;

fn serialised<T: Serialize>(all: &[T]) -> Vec<String> {
    all.iter()
        .map(
            |phase| match serde_json::to_value(phase).expect("serialisable") {
                serde_json::Value::String(name) => name,
                other => panic!("a phase serialises to a string, not {other}"),
            },
        )
        .collect()
}

#[test]
fn phase_names_are_what_status_phase_holds() {
    assert_eq!(Phase::NAMES.to_vec(), serialised(&Phase::ALL));
    assert_eq!(AgentPhase::NAMES.to_vec(), serialised(&AgentPhase::ALL));
    assert_eq!(RunPhase::NAMES.to_vec(), serialised(&RunPhase::ALL));
}
