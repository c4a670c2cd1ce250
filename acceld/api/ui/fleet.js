// acceld's fleet view: reads the JSON API with the user's token and draws hosts, their
// devices and a summary. Read-only. Every string from the API reaches the page through
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
  };
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
    const text = [dev.name, dev.uuid, dev.device_type, dev.state, dev.health].join(" ");
    return [row, text.toLowerCase()];
  }

  function hostRow(host, devs, agent) {
    const row = el("tr", null, "host");
    const cell = el("th");
    cell.colSpan = 7;
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
  }

  function draw(data) {
    const newRows = new Map();
    const [rows, hostCount] = fleetRows(data, newRows);
    $("summary").replaceChildren(summary(data));
    $("fleet").replaceChildren(rows);
    rowText = newRows;
    applyFilter();
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

  async function load() {
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (!token) {
      showLogin("Enter a token.");
      return;
    }
    status("loading");
    const [services, accelerators, arqs] = await Promise.all([
      getJSON(API.services, token), getJSON(API.accelerators, token),
      getJSON(API.arqs, token)]);
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
    });
    mark("built", performance.now());
    requestAnimationFrame(() => setTimeout(() => mark("rendered", performance.now()), 0));
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
    load().catch((err) => status(`Failed: ${err}`));
  }

  start();
})();
