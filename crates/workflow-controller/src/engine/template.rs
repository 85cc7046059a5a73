//! A step's input template: text with `{{ input }}` (the run's input) and
//! `{{ steps.NAME.output }}` (the output of an earlier step), spaces inside the braces optional.
//! That is the whole grammar, so no template engine: anything else between `{{` and `}}` is an
//! error that names it, caught when the workflow is validated rather than when the step runs.
//! Substituted text is never read as a template again: an output holding `{{ input }}` stays
//! as it is.

/// Why a template cannot be read or rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("the template has a `{{{{` without a closing `}}}}` (at character {position})")]
    Unclosed { position: usize },
    #[error(
        "unknown template expression `{{{{ {expression} }}}}`: only `{{{{ input }}}}` and \
         `{{{{ steps.NAME.output }}}}` are supported"
    )]
    UnknownExpression { expression: String },
    #[error("the template reads the output of step {step}, which has none")]
    MissingOutput { step: String },
}

/// A piece of a template: text as it is, or a value to substitute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Segment<'a> {
    Text(&'a str),
    Input,
    StepOutput(&'a str),
}

fn parse(template: &str) -> Result<Vec<Segment<'_>>, TemplateError> {
    let mut segments = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        if open > 0 {
            segments.push(Segment::Text(&rest[..open]));
        }
        let after_open = &rest[open + 2..];
        let Some(close) = after_open.find("}}") else {
            let consumed = template.len() - rest.len() + open;
            return Err(TemplateError::Unclosed {
                position: template[..consumed].chars().count(),
            });
        };
        segments.push(expression(after_open[..close].trim())?);
        rest = &after_open[close + 2..];
    }
    if !rest.is_empty() {
        segments.push(Segment::Text(rest));
    }
    Ok(segments)
}

fn expression(expression: &str) -> Result<Segment<'_>, TemplateError> {
    if expression == "input" {
        return Ok(Segment::Input);
    }
    expression
        .strip_prefix("steps.")
        .and_then(|rest| rest.strip_suffix(".output"))
        .filter(|step| is_step_name(step))
        .map(Segment::StepOutput)
        .ok_or_else(|| TemplateError::UnknownExpression {
            expression: expression.to_string(),
        })
}

/// Step names are DNS labels; upper case and `_` are let through here so that the workflow's
/// validation names the step as unknown instead of calling the expression malformed.
fn is_step_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The steps whose outputs `template` reads, each once, in order of first appearance: the
/// controller checks that a step depends on each of them.
pub fn references(template: &str) -> Result<Vec<String>, TemplateError> {
    let mut steps: Vec<String> = Vec::new();
    for segment in parse(template)? {
        if let Segment::StepOutput(step) = segment
            && !steps.iter().any(|known| known == step)
        {
            steps.push(step.to_string());
        }
    }
    Ok(steps)
}

/// `template` with its expressions replaced: `input`, and each step's output as `output_of`
/// gives it.
pub fn render<'o>(
    template: &str,
    input: &str,
    output_of: impl Fn(&str) -> Option<&'o str>,
) -> Result<String, TemplateError> {
    let mut rendered = String::with_capacity(template.len());
    for segment in parse(template)? {
        match segment {
            Segment::Text(text) => rendered.push_str(text),
            Segment::Input => rendered.push_str(input),
            Segment::StepOutput(step) => {
                let output = output_of(step).ok_or_else(|| TemplateError::MissingOutput {
                    step: step.to_string(),
                })?;
                rendered.push_str(output);
            }
        }
    }
    Ok(rendered)
}

/// The text a step sends: its `input` template rendered, or the run's input when it has none.
pub fn render_step_input<'o>(
    template: Option<&str>,
    input: &str,
    output_of: impl Fn(&str) -> Option<&'o str>,
) -> Result<String, TemplateError> {
    match template {
        Some(template) => render(template, input, output_of),
        None => Ok(input.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outputs(step: &str) -> Option<&'static str> {
        match step {
            "research" => Some("three sources"),
            "draft" => Some("a draft"),
            "sneaky" => Some("{{ input }}"),
            _ => None,
        }
    }

    #[test]
    fn substitutes_the_input_and_step_outputs_with_or_without_spaces() {
        assert_eq!(
            render(
                "Topic: {{input}}. Notes: {{ steps.research.output }}; {{  steps.draft.output}}",
                "rust",
                outputs
            ),
            Ok("Topic: rust. Notes: three sources; a draft".to_string())
        );
    }

    #[test]
    fn text_without_expressions_is_kept_as_is() {
        for text in ["", "plain", "a } b { c", "}} closing only", "ünïcode ✓"] {
            assert_eq!(render(text, "in", outputs), Ok(text.to_string()));
        }
    }

    #[test]
    fn substituted_text_is_not_read_again() {
        assert_eq!(
            render("{{ steps.sneaky.output }}", "SECRET", outputs),
            Ok("{{ input }}".to_string())
        );
    }

    #[test]
    fn an_unset_step_input_is_the_run_input() {
        assert_eq!(
            render_step_input(None, "{{ not a template }}", outputs),
            Ok("{{ not a template }}".to_string())
        );
        assert_eq!(
            render_step_input(Some("say {{ input }}"), "hi", outputs),
            Ok("say hi".to_string())
        );
    }

    #[test]
    fn anything_else_in_braces_is_an_error_naming_it() {
        for (template, expression) in [
            ("{{ inputs }}", "inputs"),
            ("{{ steps.a.result }}", "steps.a.result"),
            ("{{ steps..output }}", "steps..output"),
            ("{{ steps.a.b.output }}", "steps.a.b.output"),
            ("x {{}} y", ""),
            ("{{ env.HOME }}", "env.HOME"),
        ] {
            let error = render(template, "", outputs).expect_err(template);
            assert_eq!(
                error,
                TemplateError::UnknownExpression {
                    expression: expression.to_string()
                }
            );
            assert!(
                error
                    .to_string()
                    .contains(&format!("`{{{{ {expression} }}}}`"))
            );
        }
        assert_eq!(
            TemplateError::UnknownExpression {
                expression: "env.HOME".into()
            }
            .to_string(),
            "unknown template expression `{{ env.HOME }}`: only `{{ input }}` and \
             `{{ steps.NAME.output }}` are supported"
        );
    }

    #[test]
    fn an_unclosed_expression_says_where() {
        assert_eq!(
            references("héllo {{ input"),
            Err(TemplateError::Unclosed { position: 6 })
        );
        assert_eq!(
            TemplateError::Unclosed { position: 6 }.to_string(),
            "the template has a `{{` without a closing `}}` (at character 6)"
        );
    }

    #[test]
    fn a_step_without_output_is_an_error() {
        assert_eq!(
            render("{{ steps.missing.output }}", "", outputs),
            Err(TemplateError::MissingOutput {
                step: "missing".to_string()
            })
        );
    }

    #[test]
    fn references_lists_each_step_once_in_order() {
        assert_eq!(
            references("{{ steps.b.output }} {{ input }} {{steps.a.output}} {{ steps.b.output }}"),
            Ok(vec!["b".to_string(), "a".to_string()])
        );
        assert_eq!(references("just {{ input }}"), Ok(vec![]));
    }
}
