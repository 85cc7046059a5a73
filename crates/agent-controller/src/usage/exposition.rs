//! Reads the Prometheus text LiteLLM serves at `/metrics/` (Python's prometheus_client, format
//! 0.0.4), line by line as it arrives, keeping only the few families the usage needs and of their
//! labels only those that name the agent: nothing is allocated per line. The families and labels
//! are LiteLLM 1.110.2's, as captured in `tests/fixtures/litellm-1.110.2-metrics.txt`.

/// A family the usage is summed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// `litellm_input_tokens_metric_total`: prompt tokens of answered calls.
    PromptTokens,
    /// `litellm_output_tokens_metric_total`: completion tokens of answered calls.
    CompletionTokens,
    /// `litellm_total_tokens_metric_total`.
    TotalTokens,
    /// `litellm_requests_metric_total`: answered calls.
    Requests,
    /// `litellm_spend_metric_total`: US dollars, by LiteLLM's prices.
    Spend,
    /// `litellm_proxy_failed_requests_metric_total`: calls the client got no answer for (a
    /// refusal for a limit among them).
    Failed,
    /// `process_start_time_seconds`: when the proxy process started (its counters with it).
    ProcessStart,
}

const FAMILIES: [(&str, Family); 7] = [
    ("litellm_input_tokens_metric_total", Family::PromptTokens),
    (
        "litellm_output_tokens_metric_total",
        Family::CompletionTokens,
    ),
    ("litellm_total_tokens_metric_total", Family::TotalTokens),
    ("litellm_requests_metric_total", Family::Requests),
    ("litellm_spend_metric_total", Family::Spend),
    ("litellm_proxy_failed_requests_metric_total", Family::Failed),
    ("process_start_time_seconds", Family::ProcessStart),
];

/// One sample of a family the usage needs, its label values as written (escapes kept: the
/// values compared with them, UIDs and aliases, have nothing to escape).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample<'a> {
    pub family: Family,
    /// The `model_list` entry's `model_info.id` (a budgeted agent's UID); empty when the router
    /// found no entry (a spend refusal).
    pub model_id: &'a str,
    /// The model name the caller sent (a budgeted agent's alias).
    pub requested_model: &'a str,
    /// `429` for a refusal for a rate limit.
    pub exception_status: &'a str,
    /// `ValueError` for a refusal for a spend limit.
    pub exception_class: &'a str,
    pub value: f64,
}

/// The sample on `line`, if it is one of a family the usage needs.
pub fn sample(line: &str) -> Option<Sample<'_>> {
    if !(line.starts_with("litellm_") || line.starts_with("process_start")) {
        return None;
    }
    let name_end = line.find(['{', ' '])?;
    let family = FAMILIES
        .iter()
        .find(|(name, _)| *name == &line[..name_end])?
        .1;
    let mut sample = Sample {
        family,
        model_id: "",
        requested_model: "",
        exception_status: "",
        exception_class: "",
        value: 0.0,
    };
    let mut rest = &line[name_end..];
    if let Some(labels) = rest.strip_prefix('{') {
        rest = read_labels(labels, &mut sample)?;
    }
    // The value, then an optional timestamp.
    let value = rest.split_ascii_whitespace().next()?;
    sample.value = value.parse().ok().filter(|v: &f64| v.is_finite())?;
    Some(sample)
}

/// Reads `key="value",...}` into `sample`; what follows the closing brace.
fn read_labels<'a>(mut text: &'a str, sample: &mut Sample<'a>) -> Option<&'a str> {
    loop {
        text = text.trim_start_matches([',', ' ']);
        if let Some(rest) = text.strip_prefix('}') {
            return Some(rest);
        }
        let (key, after) = text.split_once("=\"")?;
        let end = closing_quote(after)?;
        let value = &after[..end];
        match key {
            "model_id" => sample.model_id = value,
            "requested_model" => sample.requested_model = value,
            "exception_status" => sample.exception_status = value,
            "exception_class" => sample.exception_class = value,
            _ => {}
        }
        text = &after[end + 1..];
    }
}

/// The index of the quote that ends a label value (`\"` and `\\` are escapes inside it).
fn closing_quote(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// Splits a body that arrives in pieces into lines, keeping only the unfinished last line
/// between pieces. A line longer than `max_line` is skipped whole (no family we read has one).
pub struct Lines {
    partial: Vec<u8>,
    max_line: usize,
    skipping: bool,
}

impl Lines {
    pub fn new(max_line: usize) -> Self {
        Self {
            partial: Vec::new(),
            max_line,
            skipping: false,
        }
    }

    /// Hands every complete line of `chunk` (with what was left of the previous one) to `each`.
    pub fn feed(&mut self, mut chunk: &[u8], each: &mut impl FnMut(&str)) {
        while let Some(end) = chunk.iter().position(|b| *b == b'\n') {
            let (line, rest) = (&chunk[..end], &chunk[end + 1..]);
            if self.skipping {
                self.skipping = false;
            } else if self.partial.is_empty() {
                read_line(line, each);
            } else {
                self.partial.extend_from_slice(line);
                read_line(&self.partial, each);
            }
            self.partial.clear();
            chunk = rest;
        }
        if self.skipping {
            return;
        }
        if self.partial.len() + chunk.len() > self.max_line {
            self.partial.clear();
            self.skipping = true;
        } else {
            self.partial.extend_from_slice(chunk);
        }
    }

    /// The last line, if the body did not end with a newline.
    pub fn finish(&mut self, each: &mut impl FnMut(&str)) {
        if !self.skipping && !self.partial.is_empty() {
            read_line(&self.partial, each);
        }
        self.partial.clear();
    }
}

fn read_line(line: &[u8], each: &mut impl FnMut(&str)) {
    if let Ok(line) = std::str::from_utf8(line) {
        each(line.trim_end_matches('\r'));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/metrics/` of the real LiteLLM 1.110.2 (see the fixture's own header for how it was made).
    pub const LITELLM_METRICS: &str =
        include_str!("../../tests/fixtures/litellm-1.110.2-metrics.txt");

    fn samples(text: &str) -> Vec<Sample<'_>> {
        text.lines().filter_map(sample).collect()
    }

    fn sum(text: &str, family: Family, model_id: &str) -> f64 {
        samples(text)
            .iter()
            .filter(|s| s.family == family && s.model_id == model_id)
            .map(|s| s.value)
            .sum()
    }

    #[test]
    fn the_real_litellm_output_gives_each_alias_its_tokens_requests_and_spend() {
        // kaos.demo.worker (tpd 400): three calls of 100 prompt and 50 completion tokens answered,
        // then two refused for the limit.
        let worker = "uid-worker";
        assert_eq!(sum(LITELLM_METRICS, Family::PromptTokens, worker), 300.0);
        assert_eq!(
            sum(LITELLM_METRICS, Family::CompletionTokens, worker),
            150.0
        );
        assert_eq!(sum(LITELLM_METRICS, Family::TotalTokens, worker), 450.0);
        assert_eq!(sum(LITELLM_METRICS, Family::Requests, worker), 3.0);
        let spend = sum(LITELLM_METRICS, Family::Spend, worker);
        assert!((spend - 0.00225).abs() < 1e-12, "{spend}");
        let refused: Vec<_> = samples(LITELLM_METRICS)
            .into_iter()
            .filter(|s| s.family == Family::Failed && s.model_id == worker)
            .collect();
        assert_eq!(refused.len(), 1);
        assert_eq!(
            (refused[0].exception_status, refused[0].value),
            ("429", 2.0)
        );
        assert_eq!(refused[0].requested_model, "kaos.demo.worker");
        // kaos.demo.spender (max_budget): its spend refusal has no model_id, only the alias.
        let spend_refusal: Vec<_> = samples(LITELLM_METRICS)
            .into_iter()
            .filter(|s| s.family == Family::Failed && s.requested_model == "kaos.demo.spender")
            .collect();
        assert_eq!(spend_refusal.len(), 1);
        assert_eq!(
            (
                spend_refusal[0].model_id,
                spend_refusal[0].exception_class,
                spend_refusal[0].value
            ),
            ("", "ValueError", 1.0)
        );
        // The proxy process's start, and nothing of the families not read (their _created
        // samples, histograms, the deployment counters).
        let start: Vec<_> = samples(LITELLM_METRICS)
            .into_iter()
            .filter(|s| s.family == Family::ProcessStart)
            .collect();
        assert_eq!(start.len(), 1);
        assert!(start[0].value > 1.7e9, "{start:?}");
        assert!(
            sample("litellm_total_tokens_metric_created{model_id=\"uid-worker\"} 1.7e9").is_none()
        );
        assert!(sample("litellm_deployment_success_responses_total{model_id=\"x\"} 3.0").is_none());
    }

    #[test]
    fn labels_with_escapes_a_trailing_comma_no_labels_and_a_timestamp() {
        let line = r#"litellm_requests_metric_total{user_agent="say \"hi\", \\ok",model_id="u",} 2.0 1700000000000"#;
        let s = sample(line).expect("a sample");
        assert_eq!((s.model_id, s.value), ("u", 2.0));
        let s = sample("process_start_time_seconds 1.79e+09").expect("a sample");
        assert_eq!(s.family, Family::ProcessStart);
        assert!(sample("litellm_requests_metric_total{model_id=\"u\"} NaN").is_none());
        assert!(sample("litellm_requests_metric_total{model_id=\"u} 1").is_none());
        assert!(sample("# TYPE litellm_requests_metric_total counter").is_none());
    }

    #[test]
    fn lines_split_across_pieces_are_joined_and_overlong_ones_skipped() {
        let text = "a 1\nbb 2\r\nccc 3";
        for size in 1..text.len() {
            let mut lines = Lines::new(100);
            let mut seen = Vec::new();
            for piece in text.as_bytes().chunks(size) {
                lines.feed(piece, &mut |l| seen.push(l.to_string()));
            }
            lines.finish(&mut |l| seen.push(l.to_string()));
            assert_eq!(seen, ["a 1", "bb 2", "ccc 3"], "pieces of {size}");
        }
        let mut lines = Lines::new(4);
        let mut seen = Vec::new();
        for piece in ["ok 1\nthis is", " too long\nok 2\n"] {
            lines.feed(piece.as_bytes(), &mut |l| seen.push(l.to_string()));
        }
        lines.finish(&mut |l| seen.push(l.to_string()));
        assert_eq!(seen, ["ok 1", "ok 2"]);
    }
}
