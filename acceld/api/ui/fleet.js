// acceld's fleet view: reads the JSON API with the user's token and draws hosts, their
// devices and a summary, the ledger of the last 24 hours, a device's usage when asked
// (one request for that device) and where a device profile would fit. Read-only. Every string from the API reaches the page through
// textContent (never as markup), and the table is built off-document in one
// DocumentFragment and attached once, so a fleet of thousands of devices costs one layout.
"use strict";

(function () {
  const TOKEN_KEY = "acceld.token";
  // where the API is mounted ("" or e.g. "/accelerator"): only an absolute path of this
  // origin, never another host ("//host")
  const mount = document.documentElement.dataset.root || "";
  const ROOT = /^(\/[A-Za-z0-9._~-]+)*$/.test(mount) ? mount : "";
  const API = {
    services: "/v1/services",
    accelerators: "/v1/accelerators",
    arqs: "/v2/accelerator_requests",
    ledger: "/v1/ledger",
    usage: "/v1/usage",
    profiles: "/v2/device_profiles",
    stats: (uuid) => `/v1/accelerators/${encodeURIComponent(uuid)}/stats`,
    availability: (name) => `/v2/device_profiles/${encodeURIComponent(name)}/availability`,
  };
  const COLUMNS = 8;                  // of the device table
  const WINDOW_MS = 24 * 3600 * 1000; // the ledger's window
  const LEDGER_SHOWN = 50;            // its newest rows shown
  const LEDGER_PAGE = 200;            // read in pages of this many rows (id order) ...
  const LEDGER_PAGES = 10;            // ... at most this many
  const AGENT = "acceld-agent";
  const NO_HOST = "(no host)";

  const $ = (id) => document.getElementById(id);

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }

  function status(text) {
    $("status").textContent = text;
  }

  function token() {
    return sessionStorage.getItem(TOKEN_KEY);
  }

  function table(headings, cls) {
    const node = el("table", null, cls);
    const head = node.appendChild(el("thead")).appendChild(el("tr"));
    for (const text of headings) head.appendChild(el("th", text));
    node.appendChild(el("tbody"));
    return node;
  }

  function addRow(body, cells) {
    const row = body.appendChild(el("tr"));
    for (const cell of cells) {
      if (cell instanceof Node) row.appendChild(el("td")).appendChild(cell);
      else row.appendChild(el("td", cell));
    }
    return row;
  }

  function short(uuid) {
    const node = el("span", uuid ? uuid.slice(0, 8) : "", "mono");
    if (uuid) node.title = uuid;
    return node;
  }

  // A token handed over in the URL's fragment (#token=...; never sent to the server) is
  // kept for this tab and taken out of the address bar and the history.
  function tokenFromFragment() {
    const match = /^#token=(.+)$/.exec(location.hash);
    if (!match) return;
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }

  function showLogin(message) {
    $("view").hidden = true;
    $("login").hidden = false;
    status(message);
    $("token").focus();
  }

  async function getJSON(path, token) {
    const resp = await fetch(ROOT + path, {
      headers: { "X-Auth-Token": token, Accept: "application/json" },
      credentials: "omit",
      cache: "no-store",
    });
    let body = null;
    try {
      body = await resp.json();
    } catch (e) {
      body = null;
    }
    if (!resp.ok) {
      const detail = body && body.errors && body.errors[0] ? body.errors[0].detail : "";
      return { status: resp.status, error: `${resp.status} ${detail}`.trim() };
    }
    return { status: resp.status, body: body };
  }

  function countBy(items, key) {
    const counts = new Map();
    for (const item of items) {
      const value = key(item);
      counts.set(value, (counts.get(value) || 0) + 1);
    }
    return counts;
  }

  function countTable(title, counts, note) {
    const box = el("div", null, "count");
    box.appendChild(el("h3", title));
    const table = el("table");
    const body = el("tbody");
    const keys = Array.from(counts.keys()).sort();
    for (const key of keys) {
      const row = el("tr");
      row.appendChild(el("th", key === null ? "none" : key));
      row.appendChild(el("td", counts.get(key), "num"));
      body.appendChild(row);
    }
    if (!keys.length) body.appendChild(el("tr")).appendChild(el("td", "none"));
    table.appendChild(body);
    box.appendChild(table);
    if (note) box.appendChild(el("p", note, "note"));
    return box;
  }

  // host -> {alive, conductor} of its agent, from /v1/services (admins only)
  function agentsByHost(services) {
    const out = new Map();
    for (const svc of services) {
      if (svc.binary === AGENT) out.set(svc.host, svc);
    }
    return out;
  }

  function groupByHost(devices) {
    const hosts = new Map();
    for (const dev of devices) {
      const host = dev.host === null ? NO_HOST : dev.host;
      if (!hosts.has(host)) hosts.set(host, []);
      hosts.get(host).push(dev);
    }
    return hosts;
  }

  function summary(data) {
    const frag = document.createDocumentFragment();
    const devices = data.devices;
    frag.appendChild(countTable("Devices by type", countBy(devices, (d) => d.device_type)));
    frag.appendChild(countTable("Devices by state", countBy(devices, (d) => d.state)));
    frag.appendChild(countTable("Devices by health", countBy(devices, (d) => d.health)));
    const held = countBy(devices, (d) => d.allocations.length ? "bound" :
      d.attached_to ? "attached" : "free");
    frag.appendChild(countTable("Devices held", held));
    if (data.services) {
      const agents = data.services.filter((s) => s.binary === AGENT);
      frag.appendChild(countTable("Agents", countBy(agents, (s) => s.alive ? "alive" : "dead")));
      const conductors = data.services.filter((s) => s.binary !== AGENT);
      frag.appendChild(countTable("Conductors (alive hosts owned)",
        new Map(conductors.map((s) => [`${s.host}${s.alive ? "" : " (dead)"}`, s.hosts || 0]))));
    } else {
      frag.appendChild(countTable("Agents", new Map(), `not shown: ${data.servicesError}`));
    }
    if (data.arqs) {
      frag.appendChild(countTable("ARQs by state", countBy(data.arqs, (arq) => arq.state)));
    } else {
      frag.appendChild(countTable("ARQs by state", new Map(), `not shown: ${data.arqsError}`));
    }
    return frag;
  }

  function attachedText(attached) {
    if (!attached) return "";
    return attached.id === null ? attached.type : `${attached.type} ${attached.id}`;
  }

  function deviceRow(dev) {
    const row = el("tr", null, `device health-${dev.health} state-${dev.state}`);
    const name = row.appendChild(el("td", dev.name));
    name.title = dev.uuid;
    row.appendChild(el("td", dev.device_type));
    row.appendChild(el("td", dev.state, "state"));
    const health = row.appendChild(el("td", dev.health, "health"));
    if (dev.health_reasons.length) health.title = dev.health_reasons.join("; ");
    row.appendChild(el("td", dev.allocations.length, "num"));
    const instances = new Set();
    for (const alloc of dev.allocations) {
      if (alloc.instance_uuid) instances.add(alloc.instance_uuid);
    }
    row.appendChild(el("td", Array.from(instances).join(" "), "mono"));
    row.appendChild(el("td", attachedText(dev.attached_to)));
    const button = row.appendChild(el("td")).appendChild(el("button", "show", "usage"));
    button.type = "button";
    button.title = `Read ${dev.name}'s usage from its agent now`;
    deviceOf.set(button, dev);
    const text = [dev.name, dev.uuid, dev.device_type, dev.state, dev.health].join(" ");
    return [row, text.toLowerCase()];
  }

  function hostRow(host, devs, agent) {
    const row = el("tr", null, "host");
    const cell = el("th");
    cell.colSpan = COLUMNS;
    cell.appendChild(el("span", host, "hostname"));
    if (agent) {
      cell.appendChild(el("span", agent.alive ? "alive" : "dead",
        agent.alive ? "badge alive" : "badge dead"));
      cell.appendChild(el("span", `conductor: ${agent.conductor || "none"}`, "meta"));
    } else if (host !== NO_HOST) {
      cell.appendChild(el("span", "no agent record", "badge unknown"));
    }
    const bound = devs.reduce((n, d) => n + d.allocations.length, 0);
    cell.appendChild(el("span", `${devs.length} devices, ${bound} ARQs bound`, "meta"));
    row.appendChild(cell);
    return row;
  }

  // One box per host holding a table (its header row, then its devices) with the page's
  // columns, all in one fragment.
  function fleetRows(data, rowText) {
    const frag = document.createDocumentFragment();
    const agents = data.services ? agentsByHost(data.services) : new Map();
    const hosts = groupByHost(data.devices);
    for (const host of agents.keys()) {
      if (!hosts.has(host)) hosts.set(host, []);   // an agent with no device yet
    }
    const names = Array.from(hosts.keys()).sort();
    const columns = $("columns");
    for (const host of names) {
      const devs = hosts.get(host).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
      const box = el("div", null, "hostbox");
      const table = box.appendChild(el("table"));
      table.appendChild(columns.cloneNode(true)).removeAttribute("id");
      const group = table.appendChild(el("tbody"));
      group.appendChild(hostRow(host, devs, agents.get(host)));
      for (const dev of devs) {
        const [row, text] = deviceRow(dev);
        rowText.set(row, `${host.toLowerCase()} ${text}`);
        group.appendChild(row);
      }
      frag.appendChild(box);
    }
    return [frag, names.length];
  }

  let rowText = new Map();
  let deviceOf = new Map();     // a device row's usage button -> its device
  let usageRows = new Map();    // a device row -> its open usage row

  function usageCells(got) {
    if (!got.body) return el("span", `usage not shown: ${got.error}`, "error");
    const frag = document.createDocumentFragment();
    const stats = got.body.stats;
    const names = Object.keys(stats).sort();
    for (const name of names) {
      frag.appendChild(el("span", `${name.replace(/_/g, " ")}: ${stats[name]}`, "stat"));
    }
    if (!names.length) frag.appendChild(el("span", "the driver reports no figures", "stat"));
    return frag;
  }

  // The device's usage (GET .../stats: read from its agent now; acceld stores none) in a
  // row under its own, or that row closed again.
  async function toggleUsage(button) {
    const row = button.closest("tr");
    const open = usageRows.get(row);
    if (open) {
      open.remove();
      usageRows.delete(row);
      button.textContent = "show";
      return;
    }
    const detail = el("tr", null, "usage");
    const cell = detail.appendChild(el("td", "reading from the agent\u2026"));
    cell.colSpan = COLUMNS;
    row.after(detail);
    usageRows.set(row, detail);
    button.textContent = "hide";
    const got = await getJSON(API.stats(deviceOf.get(button).uuid), token());
    cell.replaceChildren(usageCells(got));
    detail.classList.add(got.body ? "read" : "refused");
  }

  function applyFilter() {
    const words = $("filter").value.toLowerCase().split(/\s+/).filter(Boolean);
    for (const box of $("fleet").children) {
      let shown = 0;
      for (const row of box.firstChild.rows) {
        if (!rowText.has(row)) continue;
        const text = rowText.get(row);
        row.hidden = !words.every((w) => text.includes(w));
        if (!row.hidden) shown++;
      }
      box.hidden = words.length > 0 && shown === 0;
    }
    for (const [row, detail] of usageRows) detail.hidden = row.hidden;
  }

  // Newest first, with the device's name where the fleet has it.
  function ledgerRows(ledger, devices) {
    const body = $("ledger-rows").tBodies[0];
    const usageBody = $("usage").tBodies[0];
    if (!ledger.rows) {
      body.replaceChildren();
      usageBody.replaceChildren();
      $("ledger-note").textContent = ledger.status === 403 ?
        `The ledger is for administrators: ${ledger.error}` : `Not shown: ${ledger.error}`;
      return;
    }
    const names = new Map(devices.map((d) => [d.uuid, d.name]));
    const rows = document.createDocumentFragment();
    for (const entry of ledger.rows.slice().reverse()) {
      const device = short(entry.device_uuid);
      if (names.has(entry.device_uuid)) device.textContent = names.get(entry.device_uuid);
      const row = addRow(rows, [entry.at.replace("T", " "), entry.event, entry.kind, device,
        entry.host || "", short(entry.arq_uuid), short(entry.instance_uuid),
        entry.project_id || "", `${entry.from_state || ""} \u2192 ${entry.to_state || ""}`]);
      row.className = "entry";
      if (entry.detail) row.title = entry.detail;
    }
    if (!ledger.rows.length) addRow(rows, ["no row in the last 24 hours"]);
    body.replaceChildren(rows);
    const usage = document.createDocumentFragment();
    const projects = ledger.usage.slice().sort((a, b) => b.device_hours - a.device_hours);
    for (const use of projects) {
      addRow(usage, [use.project === null ? "none" : use.project, use.device_hours.toFixed(3),
        use.holdings]).className = "project";
    }
    if (!projects.length) addRow(usage, ["no device held"]);
    usageBody.replaceChildren(usage);
    $("ledger-note").textContent = ledger.complete ?
      `${ledger.rows.length} of the window's rows shown, since ${ledger.since} UTC.` :
      `More than ${LEDGER_PAGE * LEDGER_PAGES} rows since ${ledger.since} UTC: shown are ` +
      `the newest of the first ${LEDGER_PAGE * LEDGER_PAGES} (acceld ledger-list has all).`;
  }

  function draw(data) {
    const newRows = new Map();
    deviceOf = new Map();
    usageRows = new Map();
    const [rows, hostCount] = fleetRows(data, newRows);
    $("summary").replaceChildren(summary(data));
    $("fleet").replaceChildren(rows);
    rowText = newRows;
    applyFilter();
    ledgerRows(data.ledger, data.devices);
    if (data.profiles) {
      const options = document.createDocumentFragment();
      for (const prof of data.profiles) options.appendChild(el("option")).value = prof.name;
      $("profiles").replaceChildren(options);
    }
    $("login").hidden = true;
    $("view").hidden = false;
    status(`${data.devices.length} devices on ${hostCount} hosts, read ` +
      new Date().toLocaleTimeString());
    document.title = `acceld fleet: ${data.devices.length} devices`;
  }

  // Marks on <html> for whoever measures the page (bench/webview.py): ms since the
  // navigation began, when the data had arrived, when the DOM was built, and after the
  // next frame was drawn.
  function mark(name, value) {
    document.documentElement.dataset[name] = value.toFixed(1);
  }

  // The ledger's rows since ``since`` (its newest LEDGER_SHOWN, read page by page in id
  // order, LEDGER_PAGES at most) and the device-hours per project since then.
  async function readLedger(token, since) {
    const usage = await getJSON(`${API.usage}?${new URLSearchParams({ since: since })}`,
      token);
    if (!usage.body) return { status: usage.status, error: usage.error };
    let rows = [];
    let marker = null;
    for (let page = 0; page < LEDGER_PAGES; page++) {
      const query = new URLSearchParams({ since: since, limit: String(LEDGER_PAGE) });
      if (marker !== null) query.set("marker", String(marker));
      const got = await getJSON(`${API.ledger}?${query}`, token);
      if (!got.body) return { status: got.status, error: got.error };
      const batch = got.body.ledger;
      rows = rows.concat(batch).slice(-LEDGER_SHOWN);
      if (!got.body.ledger_links || !batch.length) {
        return { rows: rows, complete: true, since: since, usage: usage.body.usage };
      }
      const entry = batch[batch.length - 1];
      marker = entry.id;
    }
    return { rows: rows, complete: false, since: since, usage: usage.body.usage };
  }

  async function load() {
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (!token) {
      showLogin("Enter a token.");
      return;
    }
    status("loading");
    const since = new Date(Date.now() - WINDOW_MS).toISOString();
    const [services, accelerators, arqs, ledger, profiles] = await Promise.all([
      getJSON(API.services, token), getJSON(API.accelerators, token),
      getJSON(API.arqs, token), readLedger(token, since), getJSON(API.profiles, token)]);
    if (accelerators.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      showLogin(`The token was refused: ${accelerators.error}`);
      return;
    }
    if (!accelerators.body) {
      status(`Cannot list the devices: ${accelerators.error}`);
      return;
    }
    mark("fetched", performance.now());
    draw({
      devices: accelerators.body.accelerator,
      services: services.body ? services.body.services : null,
      servicesError: services.error,
      arqs: arqs.body ? arqs.body.arqs : null,
      arqsError: arqs.error,
      ledger: ledger,
      profiles: profiles.body ? profiles.body.device_profiles : null,
    });
    mark("built", performance.now());
    requestAnimationFrame(() => setTimeout(() => mark("rendered", performance.now()), 0));
  }

  function explainAnswer(name, got) {
    const frag = document.createDocumentFragment();
    if (!got.body) {
      frag.appendChild(el("p", `Cannot explain ${name}: ${got.error}`, "error"));
      return frag;
    }
    const fit = got.body;
    frag.appendChild(el("p", `${fit.count} instance${fit.count === 1 ? "" : "s"} of ` +
      `${fit.device_profile_name} would fit now (group policy ${fit.group_policy}).`, "total"));
    if (fit.hosts.length) {
      frag.appendChild(el("h3", "Where it fits"));
      const hosts = frag.appendChild(table(["Host", "Instances", "Providers"], "list fits"));
      for (const place of fit.hosts) {
        addRow(hosts.tBodies[0], [place.hostname, place.count,
          place.device_rp_uuids.join(" ")]);
      }
    }
    if (fit.not_fitting.length) {
      frag.appendChild(el("h3", "Where it does not fit, and the first reason"));
      const misses = frag.appendChild(table(["Host", "Reason", "Detail"], "list misses"));
      for (const miss of fit.not_fitting) {
        addRow(misses.tBodies[0], [miss.hostname, miss.reason, miss.detail]);
      }
    }
    return frag;
  }

  async function explain() {
    const name = $("profile").value.trim();
    if (!name) return;
    $("explain-answer").replaceChildren(el("p", `asking where ${name} fits\u2026`));
    const got = await getJSON(API.availability(name), token());
    $("explain-answer").replaceChildren(explainAnswer(name, got));
    mark("explained", performance.now());
  }

  function start() {
    tokenFromFragment();
    $("login").addEventListener("submit", (event) => {
      event.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, $("token").value);
      $("token").value = "";
      load();
    });
    $("reload").addEventListener("click", () => load());
    $("forget").addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      showLogin("Token forgotten.");
    });
    $("filter").addEventListener("input", applyFilter);
    $("fleet").addEventListener("click", (event) => {
      const button = event.target.closest("button.usage");
      if (button) toggleUsage(button).catch((err) => status(`Failed: ${err}`));
    });
    $("explain-form").addEventListener("submit", (event) => {
      event.preventDefault();
      explain().catch((err) => status(`Failed: ${err}`));
    });
    load().catch((err) => status(`Failed: ${err}`));
  }

  start();
})();
