//! `instances list [--offline] [--json]`: fleetagent's instance table joined with vast.ai's
//! listing. `instances stop ID [--force] [--reason]`: an operator stop through the same stop
//! tool and protections as the model's (`--force` lifts them); a refusal exits 1 with one line.

use std::collections::HashSet;

use anyhow::{bail, Result};
use serde_json::{json, Value};

use crate::cli::{InstancesCommand, InstancesListArgs, InstancesStopArgs};
use crate::clock::human_duration;
use crate::cmd::App;
use crate::fleet::{self, LABEL_CHARS};
use crate::services;
use crate::store::{events, instances};
use crate::text::clip;
use crate::tools::{self, Actor, ToolCtx};
use crate::vast::Instance;

pub fn run(app: &App, command: &InstancesCommand) -> Result<()> {
    match command {
        InstancesCommand::List(a) => list(app, a),
        InstancesCommand::Stop(a) => stop(app, a),
    }
}

fn list(app: &App, args: &InstancesListArgs) -> Result<()> {
    let (loaded, _dir, store) = super::open_existing(app)?;
    let config = &loaded.config;
    let rows = instances::live(&store.conn)?;
    let (listing, listing_error): (Option<Vec<Instance>>, Option<String>) = if args.offline {
        (None, None)
    } else {
        match services::build_vast(config, &app.env, app.clock.clone())? {
            None => (None, Some(fleet::NO_VAST_KEY.to_string())),
            Some(vast) => {
                crate::output::waiting("vast.ai", services::vast_call_bound(config));
                match vast.list_instances() {
                    Ok(l) => (Some(l), None),
                    Err(e) => (None, Some(clip(&e.to_string(), 300))),
                }
            }
        }
    };
    let now = app.now();
    let prefix = &config.vast.label_prefix;
    let listed = |id: Option<i64>| -> Option<&Instance> {
        let id = id?;
        listing.as_ref()?.iter().find(|i| i.id as i64 == id)
    };
    let mut out: Vec<Value> = Vec::new();
    let mut seen: HashSet<u64> = HashSet::new();
    for r in &rows {
        let live = listed(r.vast_id);
        if let Some(i) = live {
            seen.insert(i.id);
        }
        let vast_status = match (&listing, live) {
            (None, _) => Value::Null,
            (Some(_), Some(i)) => json!(i.actual_status.as_deref().unwrap_or("null")),
            (Some(_), None) if r.vast_id.is_some() => json!("not listed"),
            (Some(_), None) => json!("not yet listed"),
        };
        out.push(json!({
            "id": r.vast_id,
            "label": r.label,
            "state": r.state,
            "vast_status": vast_status,
            "gpu": r.gpu_name,
            "dph": r.dph,
            "age_secs": (now - r.created_at).max(0) / 1000,
            "curio_machine": r.machine_name,
            "adopted": r.adopted,
            "tracked": true,
        }));
    }
    let mut not_ours = 0;
    for i in listing.iter().flatten() {
        if seen.contains(&i.id) {
            continue;
        }
        if fleet::is_ours(i.label.as_deref(), prefix) {
            out.push(json!({
                "id": i.id,
                "label": i.label,
                "state": "untracked",
                "vast_status": i.actual_status.as_deref().unwrap_or("null"),
                "gpu": i.gpu_name,
                "dph": i.dph_total,
                "age_secs": i.start_date.map(|s| ((now as f64 / 1000.0) - s).max(0.0) as i64),
                "curio_machine": Value::Null,
                "adopted": false,
                "tracked": false,
            }));
        } else {
            not_ours += 1;
        }
    }

    if args.json {
        let doc = json!({
            "instances": out,
            "not_ours": listing.as_ref().map(|_| not_ours),
            "listing_error": listing_error,
            "offline": args.offline,
        });
        crate::outln!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    if let Some(e) = &listing_error {
        eprintln!("fleetagent: vast.ai listing unavailable ({e}); showing fleetagent's table only");
    }
    if out.is_empty() {
        crate::outln!("no instances");
    } else {
        crate::outln!(
            "{:<10} {:<32} {:<10} {:<12} {:<12} {:>7} {:>7}  CURIO",
            "ID",
            "LABEL",
            "STATE",
            "VAST",
            "GPU",
            "$/H",
            "AGE"
        );
        for v in &out {
            let s = |k: &str| {
                v[k].as_str()
                    .map(String::from)
                    .unwrap_or_else(|| "-".into())
            };
            crate::outln!(
                "{:<10} {:<32} {:<10} {:<12} {:<12} {:>7} {:>7}  {}",
                v["id"]
                    .as_i64()
                    .map(|i| i.to_string())
                    .unwrap_or_else(|| "-".into()),
                clip(&s("label"), 32),
                s("state"),
                clip(&s("vast_status"), 12),
                clip(&s("gpu"), 12),
                v["dph"]
                    .as_f64()
                    .map(|d| format!("{d:.3}"))
                    .unwrap_or_else(|| "-".into()),
                v["age_secs"]
                    .as_i64()
                    .map(|a| human_duration(a * 1000))
                    .unwrap_or_else(|| "-".into()),
                clip(&s("curio_machine"), LABEL_CHARS),
            );
        }
    }
    if not_ours > 0 {
        crate::outln!(
            "{not_ours} other instance(s) on the account are not ours (label prefix {prefix:?})"
        );
    }
    Ok(())
}

fn stop(app: &App, args: &InstancesStopArgs) -> Result<()> {
    let Some(id) = args.id else {
        anyhow::bail!("instances stop --all is not built yet");
    };
    let reason = args.reason.as_deref().unwrap_or("operator request");
    let (loaded, dir, mut store) = super::open_existing(app)?;
    let config = &loaded.config;
    let services = services::build_services(config, &app.env, app.clock.clone(), false)?;
    if services.vast.is_none() && !config.policy.dry_run {
        bail!("no vast.ai API key: set VAST_API_KEY or provide the vast_api_key credential");
    }
    let mut snapshot = crate::run::observe::view(&store, config, &services, app.clock.as_ref())?;
    let now = app.now();
    let result = {
        let mut ctx = ToolCtx {
            store: &mut store,
            ctx: crate::services::Ctx {
                config,
                env: &app.env,
                clock: app.clock.as_ref(),
                services: &services,
            },
            snapshot: &mut snapshot,
            run_id: 0,
            actor: Actor::Operator,
            call_id: format!("operator-{now}"),
        };
        tools::stop::stop(&mut ctx, id, reason, args.force)?
    };
    if let Some(code) = result.error_code() {
        let msg = result
            .content
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("");
        bail!("refused ({code}): {msg}");
    }
    if let Some(already) = result.content["already"].as_str() {
        // Nothing changed: nothing for the agent to hear of.
        crate::outln!("instance {id} already {already}");
        return Ok(());
    }
    let done = result.content["done"].as_str().unwrap_or("stopped");
    let reason = format!(
        "operator {done} instance {id}{}",
        if args.force { " (forced)" } else { "" }
    );
    // The agent hears of it on its next pass, like any other change.
    let event = events::insert(&store.conn, 1, "operator", &reason, None, now)?;
    crate::trigger::ring(&dir, event, 1, &reason, now)?;
    crate::outln!("instance {id} {done}");
    Ok(())
}
