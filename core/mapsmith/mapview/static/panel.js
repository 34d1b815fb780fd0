// MapSmith map panel: draws the data of a preview_map / export_map call with Leaflet (inlined above).
// Data comes either from the page itself (an exported file) or from an MCP Apps host's tool result.
// Every value from the data is put into the page as text, never as HTML.
(function () {
  "use strict";
  var PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];
  var panel = { ready: false, map: null, layers: [], backgroundErrors: 0, data: null };
  window.mapsmithPanel = panel;

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }

  function setStatus(kind, text) {
    var status = document.getElementById("status");
    status.setAttribute("data-status", kind);
    status.textContent = text;
  }

  function showFeature(layerName, featureId, properties) {
    var section = document.getElementById("feature");
    var table = document.getElementById("feature-attributes");
    document.getElementById("feature-title").textContent = layerName + " #" + featureId;
    section.setAttribute("data-layer", layerName);
    section.setAttribute("data-feature", String(featureId));
    table.textContent = "";
    Object.keys(properties).forEach(function (key) {
      var row = el("tr");
      row.appendChild(el("th", { scope: "row" }, key));
      var value = properties[key];
      row.appendChild(el("td", { "data-field": key }, value === null ? "(null)" : value));
      table.appendChild(row);
    });
    section.hidden = false;
  }

  function card(layer, colour) {
    var p = layer.provenance;
    var item = el("li", { "class": "layer", "data-path": layer.path, "data-kind": layer.kind, "data-state": p.state });
    var head = el("label", { "class": "layer-head" });
    var toggle = el("input", { type: "checkbox", "class": "layer-toggle" });
    toggle.checked = true;
    head.appendChild(toggle);
    head.appendChild(el("span", { "class": "swatch", style: "background:" + colour }));
    head.appendChild(el("span", { "class": "layer-name" }, layer.name));
    item.appendChild(head);
    item.appendChild(el("span", { "class": "state", "data-state": p.state }, p.state_label));
    var dl = el("dl", { "class": "card" });
    function row(term, value) { dl.appendChild(el("dt", {}, term)); dl.appendChild(el("dd", {}, value)); }
    row("operation", p.operation || "(unknown)");
    row("engine", p.engine ? (p.engine.name + " " + p.engine.version) : "(unknown)");
    row("checks", p.critical_passed + " of " + p.critical_checks + " critical passed");
    row("why", p.reason);
    if (p.manifest_path) { row("manifest", p.manifest_path); }
    item.appendChild(dl);
    if (p.failed_checks && p.failed_checks.length) {
      var ul = el("ul", { "class": "failed-checks" });
      p.failed_checks.forEach(function (c) { ul.appendChild(el("li", {}, c.name + ": " + c.detail)); });
      item.appendChild(ul);
    }
    item.appendChild(el("p", { "class": "lossy" }, layer.lossy));
    if (layer.kind === "raster" && layer.raster.legend.min !== null) {
      var legend = layer.raster.legend;
      var ramp = el("div", { "class": "legend-ramp",
        style: "background:linear-gradient(to right," + legend.ramp.join(",") + ")" });
      item.appendChild(ramp);
      var values = el("div", { "class": "legend-values" });
      values.appendChild(el("span", { "class": "legend-min" }, legend.min));
      values.appendChild(el("span", {}, "band " + layer.raster.band + " (" + legend.scope + ")"));
      values.appendChild(el("span", { "class": "legend-max" }, legend.max));
      item.appendChild(values);
    }
    return { item: item, toggle: toggle };
  }

  function render(data) {
    panel.data = data;
    var map = L.map("map", { preferCanvas: false });
    panel.map = map;
    // Rasters sit below every vector (Leaflet's overlay pane is 400), so they never hide a feature to click.
    map.createPane("rasters").style.zIndex = 350;
    if (data.background && data.background.kind === "osm") {
      var tiles = L.tileLayer(data.background.tiles, { maxZoom: 19, attribution: data.background.attribution });
      tiles.on("tileerror", function () {
        panel.backgroundErrors += 1;
        document.getElementById("map").setAttribute("data-background", "plain");
      });
      tiles.addTo(map);
    } else {
      document.getElementById("map").setAttribute("data-background", "plain");
    }
    var list = document.getElementById("layers");
    data.layers.forEach(function (layer, index) {
      var colour = PALETTE[index % PALETTE.length];
      var drawn;
      if (layer.kind === "raster") {
        var b = layer.bounds;
        drawn = L.imageOverlay(layer.raster.png_data_uri, [[b[1], b[0]], [b[3], b[2]]],
          { opacity: 0.85, pane: "rasters" });
      } else {
        drawn = L.geoJSON(layer.vector.geojson, {
          style: function () { return { color: colour, weight: 2, fillOpacity: 0.35 }; },
          pointToLayer: function (feature, latlng) {
            return L.circleMarker(latlng, { radius: 6, color: colour, fillOpacity: 0.7 });
          },
          onEachFeature: function (feature, featureLayer) {
            featureLayer.on("click", function () { showFeature(layer.name, feature.id, feature.properties); });
          }
        });
      }
      drawn.addTo(map);
      var entry = card(layer, colour);
      entry.toggle.addEventListener("change", function () {
        if (entry.toggle.checked) { drawn.addTo(map); } else { map.removeLayer(drawn); }
      });
      list.appendChild(entry.item);
      panel.layers.push({ data: layer, drawn: drawn });
    });
    if (data.bounds) {
      map.fitBounds([[data.bounds[1], data.bounds[0]], [data.bounds[3], data.bounds[2]]], { padding: [20, 20] });
    } else {
      map.setView([0, 0], 2);
    }
    var s = data.states || {};
    setStatus("ready", data.layers.length + " layer(s): " + (s.verified || 0) + " verified, " +
      (s.verification_failed || 0) + " failed, " + (s.not_verifiable || 0) + " not verifiable");
    panel.ready = true;
  }

  // The screen point of one drawn feature (its bounds' centre, or the point itself), for tests and tours.
  panel.featurePoint = function (layerIndex, featureId) {
    var found = null;
    panel.layers[layerIndex].drawn.eachLayer(function (l) { if (l.feature && l.feature.id === featureId) { found = l; } });
    if (!found) { return null; }
    var latlng = found.getLatLng ? found.getLatLng() : found.getBounds().getCenter();
    var p = panel.map.latLngToContainerPoint(latlng);
    var box = document.getElementById("map").getBoundingClientRect();
    return { x: box.left + p.x, y: box.top + p.y };
  };

  // -- MCP Apps (io.modelcontextprotocol/ui): a JSON-RPC handshake with the host over postMessage --
  var nextId = 1;
  var pending = {};
  function toHost(message) { window.parent.postMessage(message, "*"); }
  function request(method, params) {
    var id = nextId++;
    toHost({ jsonrpc: "2.0", id: id, method: method, params: params });
    return new Promise(function (resolve, reject) { pending[id] = { resolve: resolve, reject: reject }; });
  }
  function onHostMessage(event) {
    if (event.source !== window.parent) { return; }
    var msg = event.data || {};
    if (msg.id !== undefined && pending[msg.id]) {
      var waiter = pending[msg.id];
      delete pending[msg.id];
      if (msg.error) { waiter.reject(msg.error); } else { waiter.resolve(msg.result); }
      return;
    }
    if (msg.method === "ui/notifications/tool-result") {
      var result = msg.params || {};
      if (result.isError) {
        var sc = result.structuredContent || {};
        setStatus("error", "The map could not be made: [" + sc.code + "] " + sc.message + " " + (sc.hint || ""));
      } else if (!panel.ready && result.structuredContent) {
        render(result.structuredContent);
        toHost({ jsonrpc: "2.0", method: "ui/notifications/size-changed",
          params: { width: document.documentElement.scrollWidth, height: document.documentElement.scrollHeight } });
      }
    }
  }

  var embedded = JSON.parse(document.getElementById("mapsmith-data").textContent);
  if (embedded) {
    render(embedded);
  } else if (window.parent !== window) {
    window.addEventListener("message", onHostMessage);
    request("ui/initialize", {
      appInfo: { name: "mapsmith-map-panel", version: "1" },
      appCapabilities: { availableDisplayModes: ["inline", "fullscreen"] },
      protocolVersion: "2026-01-26"
    }).then(function () {
      toHost({ jsonrpc: "2.0", method: "ui/notifications/initialized", params: {} });
    }, function (error) {
      setStatus("error", "The host refused the panel: " + JSON.stringify(error));
    });
  } else {
    setStatus("error", "No map data: open a page written by export_map, or call preview_map from an MCP Apps host.");
  }
})();
