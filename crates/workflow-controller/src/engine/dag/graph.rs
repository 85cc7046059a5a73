//! The plan as a graph: its checks (names, dependencies, cycles, what inputs and conditions
//! read) and the order of its steps.

use std::collections::{BTreeSet, HashMap};

use kaos_api::workflow::WorkflowStep;

use crate::engine::template::{self};
use crate::engine::when::Condition;

use super::GraphError;

/// A validated plan: names, the order to look at steps in (dependencies first), and what each
/// step depends on, directly or not.
pub(super) struct Graph<'p> {
    pub(super) plan: &'p [WorkflowStep],
    pub(super) index: HashMap<&'p str, usize>,
    pub(super) order: Vec<usize>,
    pub(super) ancestors: Vec<BTreeSet<usize>>,
    pub(super) conditions: Vec<Option<Condition>>,
}

impl<'p> Graph<'p> {
    pub(super) fn new(plan: &'p [WorkflowStep]) -> Result<Self, GraphError> {
        if plan.is_empty() {
            return Err(GraphError::NoSteps);
        }
        let mut index = HashMap::new();
        for (position, step) in plan.iter().enumerate() {
            if index.insert(step.name.as_str(), position).is_some() {
                return Err(GraphError::DuplicateStep {
                    step: step.name.clone(),
                });
            }
        }
        for step in plan {
            if let Some(dependency) = step
                .depends_on
                .iter()
                .find(|dependency| !index.contains_key(dependency.as_str()))
            {
                return Err(GraphError::UnknownDependency {
                    step: step.name.clone(),
                    dependency: dependency.clone(),
                });
            }
        }
        let dependencies: Vec<Vec<usize>> = plan
            .iter()
            .map(|step| {
                step.depends_on
                    .iter()
                    .filter_map(|dependency| index.get(dependency.as_str()).copied())
                    .collect()
            })
            .collect();
        let order = topological_order(plan, &dependencies)?;
        let mut ancestors = vec![BTreeSet::new(); plan.len()];
        for &step in &order {
            let mut all = BTreeSet::new();
            for &dependency in &dependencies[step] {
                all.insert(dependency);
                all.extend(ancestors[dependency].iter().copied());
            }
            ancestors[step] = all;
        }

        for (position, step) in plan.iter().enumerate() {
            let Some(input) = &step.input else { continue };
            let references = template::references(input).map_err(|error| GraphError::Template {
                step: step.name.clone(),
                error,
            })?;
            for reference in references {
                match index.get(reference.as_str()) {
                    None => {
                        return Err(GraphError::UnknownReference {
                            step: step.name.clone(),
                            reference,
                        });
                    }
                    Some(referenced) if !ancestors[position].contains(referenced) => {
                        return Err(GraphError::UnorderedReference {
                            step: step.name.clone(),
                            reference,
                        });
                    }
                    Some(_) => {}
                }
            }
        }
        let conditions = plan
            .iter()
            .map(|step| {
                step.when
                    .as_deref()
                    .map(Condition::compile)
                    .transpose()
                    .map_err(|error| GraphError::Condition {
                        step: step.name.clone(),
                        error,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;

        Ok(Self {
            plan,
            index,
            order,
            ancestors,
            conditions,
        })
    }
}

/// Dependencies before dependents (depth first, in plan order), or the first cycle found.
pub(super) fn topological_order(
    plan: &[WorkflowStep],
    dependencies: &[Vec<usize>],
) -> Result<Vec<usize>, GraphError> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Unvisited,
        OnPath,
        Done,
    }
    struct Walk<'a> {
        plan: &'a [WorkflowStep],
        dependencies: &'a [Vec<usize>],
        marks: Vec<Mark>,
        path: Vec<usize>,
        order: Vec<usize>,
    }
    impl Walk<'_> {
        fn visit(&mut self, step: usize) -> Result<(), GraphError> {
            match self.marks[step] {
                Mark::Done => return Ok(()),
                Mark::OnPath => {
                    let start = self
                        .path
                        .iter()
                        .position(|&on_path| on_path == step)
                        .unwrap_or(0);
                    let names: Vec<&str> = self.path[start..]
                        .iter()
                        .chain(std::iter::once(&step))
                        .map(|&index| self.plan[index].name.as_str())
                        .collect();
                    return Err(GraphError::Cycle {
                        path: names.join(" → "),
                    });
                }
                Mark::Unvisited => {}
            }
            self.marks[step] = Mark::OnPath;
            self.path.push(step);
            for position in 0..self.dependencies[step].len() {
                self.visit(self.dependencies[step][position])?;
            }
            self.path.pop();
            self.marks[step] = Mark::Done;
            self.order.push(step);
            Ok(())
        }
    }
    let mut walk = Walk {
        plan,
        dependencies,
        marks: vec![Mark::Unvisited; plan.len()],
        path: Vec::new(),
        order: Vec::with_capacity(plan.len()),
    };
    for step in 0..plan.len() {
        walk.visit(step)?;
    }
    Ok(walk.order)
}
