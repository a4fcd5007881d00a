"""An interactive point-cloud viewer for the report: a WebGL canvas with the points inline.

The points (a subsample, see io/cloud_preview.py) travel as base64 float32 xyz and uint8 RGB,
centred and scaled to the unit ball in Python; the page's script draws them as GL points and
turns them with the mouse (drag: rotate, wheel: zoom). No library, no network: the report stays
one offline file, and 200k points cost ~3 MB of page and one draw call.
"""

from __future__ import annotations

import base64
import html

import numpy as np

# One copy per page; each viewer is a <canvas data-xyz=... data-rgb=...> it finds.
VIEWER_SCRIPT = """<script>
(function () {
  function b64(s) { var b = atob(s), a = new Uint8Array(b.length);
    for (var i = 0; i < b.length; i++) a[i] = b.charCodeAt(i); return a.buffer; }
  function shader(gl, type, src) { var s = gl.createShader(type); gl.shaderSource(s, src);
    gl.compileShader(s); return s; }
  function mul(a, b) { var r = new Array(9); for (var i = 0; i < 3; i++) for (var j = 0; j < 3; j++)
    r[3 * i + j] = a[3 * i] * b[j] + a[3 * i + 1] * b[3 + j] + a[3 * i + 2] * b[6 + j]; return r; }
  function rot(ax, ay) { var cx = Math.cos(ax), sx = Math.sin(ax), cy = Math.cos(ay), sy = Math.sin(ay);
    return mul([1, 0, 0, 0, cx, -sx, 0, sx, cx], [cy, 0, sy, 0, 1, 0, -sy, 0, cy]); }
  document.querySelectorAll("canvas.cloud").forEach(function (cv) {
    var gl = cv.getContext("webgl");
    if (!gl) { cv.outerHTML = "<p class=note>WebGL is not available: no 3-D view.</p>"; return; }
    var xyz = new Float32Array(b64(cv.dataset.xyz)), rgb = new Uint8Array(b64(cv.dataset.rgb));
    var prog = gl.createProgram();
    gl.attachShader(prog, shader(gl, gl.VERTEX_SHADER,
      "attribute vec3 p; attribute vec3 c; uniform mat3 R; uniform float z; uniform float s; varying vec3 v;" +
      "void main() { vec3 q = R * p; gl_Position = vec4(q.x * z, q.y * z, q.z * 0.5, 1.0);" +
      " gl_PointSize = s; v = c; }"));
    gl.attachShader(prog, shader(gl, gl.FRAGMENT_SHADER,
      "precision mediump float; varying vec3 v; void main() { gl_FragColor = vec4(v, 1.0); }"));
    gl.linkProgram(prog); gl.useProgram(prog);
    function attr(name, data, size, type, norm) { var b = gl.createBuffer(); gl.bindBuffer(gl.ARRAY_BUFFER, b);
      gl.bufferData(gl.ARRAY_BUFFER, data, gl.STATIC_DRAW); var loc = gl.getAttribLocation(prog, name);
      gl.enableVertexAttribArray(loc); gl.vertexAttribPointer(loc, size, type, norm, 0, 0); }
    attr("p", xyz, 3, gl.FLOAT, false); attr("c", rgb, 3, gl.UNSIGNED_BYTE, true);
    var ax = -0.4, ay = 0.6, zoom = 1.0, drag = null, n = xyz.length / 3;
    var size = Math.max(1.0, Math.min(4.0, 300000 / Math.max(n, 1)));
    function draw() { gl.viewport(0, 0, cv.width, cv.height); gl.clearColor(1, 1, 1, 1);
      gl.enable(gl.DEPTH_TEST); gl.clear(gl.COLOR_BUFFER_BIT | gl.DEPTH_BUFFER_BIT);
      var R = rot(ax, ay), T = [R[0], R[3], R[6], R[1], R[4], R[7], R[2], R[5], R[8]];
      gl.uniformMatrix3fv(gl.getUniformLocation(prog, "R"), false, T);
      gl.uniform1f(gl.getUniformLocation(prog, "z"), zoom);
      gl.uniform1f(gl.getUniformLocation(prog, "s"), size); gl.drawArrays(gl.POINTS, 0, n); }
    cv.onmousedown = function (e) { drag = [e.clientX, e.clientY]; };
    window.addEventListener("mouseup", function () { drag = null; });
    cv.onmousemove = function (e) { if (!drag) return; ay += (e.clientX - drag[0]) * 0.01;
      ax += (e.clientY - drag[1]) * 0.01; drag = [e.clientX, e.clientY]; draw(); };
    cv.onwheel = function (e) { e.preventDefault(); zoom *= Math.exp(-e.deltaY * 0.001); draw(); };
    draw();
  });
})();
</script>"""


def cloud_canvas(xyz: np.ndarray, rgb: np.ndarray | None, title: str, size_px: int = 560) -> str:
    """<figure> with a viewer of xyz [N, 3] (any float) and rgb [N, 3] uint8 (None: grey by height)."""
    xyz = np.asarray(xyz, dtype=np.float64)
    if len(xyz) == 0:
        return f"<p>{html.escape(title)}: empty cloud</p>"
    centre = np.median(xyz, axis=0)
    radius = float(np.percentile(np.linalg.norm(xyz - centre, axis=1), 98)) or 1.0
    unit = ((xyz - centre) / radius).astype(np.float32)
    unit[:, 1] *= -1.0  # image-style y down in COLMAP worlds more often than not: show y up
    if rgb is None:
        z = unit[:, 2]
        grey = np.clip((z - z.min()) / max(float(np.ptp(z)), 1e-9) * 200 + 30, 0, 255).astype(np.uint8)
        rgb = np.repeat(grey[:, None], 3, axis=1)
    data_xyz = base64.b64encode(np.ascontiguousarray(unit).tobytes()).decode("ascii")
    data_rgb = base64.b64encode(np.ascontiguousarray(rgb, dtype=np.uint8).tobytes()).decode("ascii")
    return (f'<figure><canvas class="cloud" width="{size_px}" height="{size_px}" data-xyz="{data_xyz}" '
            f'data-rgb="{data_rgb}"></canvas><figcaption>{html.escape(title)} (drag to turn, wheel to zoom)'
            f"</figcaption></figure>")
