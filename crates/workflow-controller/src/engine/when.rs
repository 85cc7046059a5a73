//! A step's `when` condition: a CEL expression over `input` (the run's input, a string) and
//! `steps` (a map from step name to `{output, phase}`, both strings), which must come out
//! `true` or `false`. Compiled on its own so the controller can reject a workflow whose
//! conditions do not parse before any of it runs.

use std::collections::{BTreeMap, HashMap};

use cel::objects::{Key, Value};
use cel::{Context, Program};

/// What a condition knows of a step that ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepOutcome {
    pub output: String,
    /// The step's phase as the run's status writes it (`Succeeded`, `Failed`, …).
    pub phase: String,
}

/// Why a condition cannot be compiled or did not give a boolean. Each names the expression, as
/// the user wrote it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConditionError {
    #[error("invalid condition `{expression}`: {reason}")]
    Compile { expression: String, reason: String },
    #[error("condition `{expression}` could not be evaluated: {reason}")]
    Evaluate { expression: String, reason: String },
    #[error("condition `{expression}` must be true or false, but it gave a {found}")]
    NotBool { expression: String, found: String },
}

/// A compiled `when` condition.
#[derive(Debug)]
pub struct Condition {
    expression: String,
    program: Program,
}

impl Condition {
    pub fn compile(expression: &str) -> Result<Self, ConditionError> {
        let program = Program::compile(expression).map_err(|errors| ConditionError::Compile {
            expression: expression.to_string(),
            reason: errors
                .errors
                .iter()
                .map(|error| {
                    format!(
                        "line {} column {}: {}",
                        error.pos.0,
                        error.pos.1 + 1,
                        error.msg
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
        })?;
        Ok(Self {
            expression: expression.to_string(),
            program,
        })
    }

    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// Whether the step should run, given the run's input and the steps that ran.
    pub fn evaluate(
        &self,
        input: &str,
        steps: &BTreeMap<String, StepOutcome>,
    ) -> Result<bool, ConditionError> {
        let mut context = Context::default();
        context.add_variable_from_value("input", input);
        context.add_variable_from_value("steps", steps_value(steps));
        match self.program.execute(&context) {
            Ok(Value::Bool(decision)) => Ok(decision),
            Ok(other) => Err(ConditionError::NotBool {
                expression: self.expression.clone(),
                found: other.type_of().to_string(),
            }),
            Err(error) => Err(ConditionError::Evaluate {
                expression: self.expression.clone(),
                reason: error.to_string(),
            }),
        }
    }
}

fn steps_value(steps: &BTreeMap<String, StepOutcome>) -> Value {
    let steps: HashMap<Key, Value> = steps
        .iter()
        .map(|(name, outcome)| {
            let fields: HashMap<Key, Value> = HashMap::from([
                (Key::from("output"), Value::from(outcome.output.as_str())),
                (Key::from("phase"), Value::from(outcome.phase.as_str())),
            ]);
            (Key::from(name.as_str()), Value::from(fields))
        })
        .collect();
    Value::from(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ran(steps: &[(&str, &str, &str)]) -> BTreeMap<String, StepOutcome> {
        steps
            .iter()
            .map(|(name, output, phase)| {
                (
                    name.to_string(),
                    StepOutcome {
                        output: output.to_string(),
                        phase: phase.to_string(),
                    },
                )
            })
            .collect()
    }

    fn evaluate(
        expression: &str,
        input: &str,
        steps: &[(&str, &str, &str)],
    ) -> Result<bool, ConditionError> {
        Condition::compile(expression)?.evaluate(input, &ran(steps))
    }

    #[test]
    fn reads_the_input_and_the_outputs_and_phases_of_steps() -> Result<(), ConditionError> {
        let steps = [
            ("triage", "URGENT: disk full", "Succeeded"),
            ("lookup", "", "Failed"),
        ];
        assert!(evaluate(
            "steps.triage.output.startsWith('URGENT')",
            "",
            &steps
        )?);
        assert!(evaluate("steps.lookup.phase == 'Failed'", "", &steps)?);
        assert!(!evaluate("steps.triage.output.contains('ok')", "", &steps)?);
        assert!(evaluate(
            "input == 'go' && 'triage' in steps",
            "go",
            &steps
        )?);
        assert!(evaluate(
            "steps.triage.output.matches('^URGENT')",
            "",
            &steps
        )?);
        assert!(!evaluate("size(input) > 3", "go", &[])?);
        Ok(())
    }

    #[test]
    fn a_result_that_is_not_a_bool_is_an_error() {
        assert_eq!(
            evaluate("steps.a.output", "", &[("a", "yes", "Succeeded")]),
            Err(ConditionError::NotBool {
                expression: "steps.a.output".to_string(),
                found: "string".to_string(),
            })
        );
        assert_eq!(
            ConditionError::NotBool {
                expression: "1 + 1".to_string(),
                found: "int".to_string(),
            }
            .to_string(),
            "condition `1 + 1` must be true or false, but it gave a int"
        );
        assert!(matches!(
            evaluate("1 + 1", "", &[]),
            Err(ConditionError::NotBool { found, .. }) if found == "int"
        ));
    }

    #[test]
    fn a_syntax_error_names_the_expression_and_where() {
        let error = Condition::compile("steps.a.output ==").expect_err("incomplete");
        let message = error.to_string();
        assert!(matches!(error, ConditionError::Compile { .. }));
        assert!(
            message.starts_with("invalid condition `steps.a.output ==`: line 1 column "),
            "{message}"
        );
        assert!(!message.contains('\n'), "{message}");
        for broken in ["(", "a &&", "'unterminated", "steps.[a]", ""] {
            assert!(Condition::compile(broken).is_err(), "{broken:?}");
        }
    }

    #[test]
    fn reading_a_step_that_did_not_run_is_an_evaluation_error() {
        let error = evaluate("steps.later.output == ''", "", &[]).expect_err("no such step");
        assert!(matches!(error, ConditionError::Evaluate { .. }), "{error}");
        assert!(
            error
                .to_string()
                .starts_with("condition `steps.later.output == ''` could not be evaluated: "),
            "{error}"
        );
        let error = evaluate("nothing == 1", "", &[]).expect_err("undeclared");
        assert!(error.to_string().contains("nothing"), "{error}");
    }
}
