'use strict';
// The glibc a compiled addon needs: the symbol versions it requires of glibc's libraries, read
// from its ELF file's version needs (the section .gnu.version_r, type SHT_GNU_verneed, kept by
// `strip`), as `objdump -p` lists them under "Version References". The dynamic loader refuses
// the file on a glibc that does not define every one of them, so the highest GLIBC_x.y is the
// oldest glibc it loads on. Used by build.js to say what it built; 64-bit little-endian ELF only
// (x86_64, aarch64), the addons it builds.

const fs = require('node:fs');

const SHT_GNU_VERNEED = 0x6ffffffe;

function cString(buf, at) {
  const end = buf.indexOf(0, at);
  return buf.toString('latin1', at, end < 0 ? buf.length : end);
}

/**
 * The versions `file` needs of other shared objects: [{ file: 'libc.so.6', version:
 * 'GLIBC_2.17' }, ...]. Throws when it is not a 64-bit little-endian ELF file.
 */
function versionNeeds(file) {
  const elf = fs.readFileSync(file);
  if (elf.length < 64 || elf.readUInt32BE(0) !== 0x7f454c46 || elf[4] !== 2 || elf[5] !== 1) {
    throw new Error(`${file} is not a 64-bit little-endian ELF file`);
  }
  const shoff = Number(elf.readBigUInt64LE(0x28));
  const shentsize = elf.readUInt16LE(0x3a);
  const shnum = elf.readUInt16LE(0x3c);
  const section = (i) => {
    const at = shoff + i * shentsize;
    return {
      type: elf.readUInt32LE(at + 4),
      offset: Number(elf.readBigUInt64LE(at + 24)),
      link: elf.readUInt32LE(at + 40),
      info: elf.readUInt32LE(at + 44),
    };
  };
  const needs = [];
  for (let i = 0; i < shnum; i++) {
    const verneed = section(i);
    if (verneed.type !== SHT_GNU_VERNEED) {
      continue;
    }
    const strings = section(verneed.link).offset;
    // sh_info entries (Elf64_Verneed), each with vn_cnt auxiliary entries (Elf64_Vernaux).
    let need = verneed.offset;
    for (let n = 0; n < verneed.info; n++) {
      const count = elf.readUInt16LE(need + 2);
      const library = cString(elf, strings + elf.readUInt32LE(need + 4));
      let aux = need + elf.readUInt32LE(need + 8);
      for (let a = 0; a < count; a++) {
        needs.push({ file: library, version: cString(elf, strings + elf.readUInt32LE(aux + 8)) });
        aux += elf.readUInt32LE(aux + 12);
      }
      need += elf.readUInt32LE(need + 12);
    }
  }
  return needs;
}

/** `GLIBC_2.17` as [2, 17]; null for another name (GLIBC_PRIVATE, GCC_3.0). */
function glibcVersion(name) {
  const m = /^GLIBC_(\d+(?:\.\d+)*)$/.exec(name);
  return m ? m[1].split('.').map(Number) : null;
}

function compareVersions(a, b) {
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const d = (a[i] || 0) - (b[i] || 0);
    if (d !== 0) {
      return d;
    }
  }
  return 0;
}

/** The oldest glibc `file` loads on, as '2.17': its highest GLIBC_ version need ('2.2.5' at least). */
function glibcNeeded(file) {
  let highest = [2, 2, 5];
  for (const { version } of versionNeeds(file)) {
    const v = glibcVersion(version);
    if (v !== null && compareVersions(v, highest) > 0) {
      highest = v;
    }
  }
  return highest.join('.');
}

module.exports = { versionNeeds, glibcNeeded, compareVersions };
