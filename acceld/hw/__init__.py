"""Hardware access for the agent's drivers: PCI addresses (:mod:`acceld.hw.pci`), sysfs with
an injectable root (:mod:`acceld.hw.sysfs`), display names (:mod:`acceld.hw.names`) and
vendor command-line tools (:mod:`acceld.hw.runner`). Nothing here keeps global state, so
tests hand drivers fake trees and recording runners instead."""
