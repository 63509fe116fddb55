/*
 * gw_lang — see gw_lang.h.
 *
 * The built-in catalogues are C tables indexed by gw_msg_t, so a key added to
 * GW_MSG_LIST without its text shows English (and fails test_gw_lang, which wants every
 * built-in language complete). An operator's file is read with jansson, checked key by
 * key against the same list, and copied into a table of its own; a set is built once
 * and only read afterwards, so workers share it without locks (gw_server publishes a new
 * one on reload through a cm_reload cell and retires the old).
 *
 * The Accept-Language parser walks the header once without allocating: it is reached by
 * every page request with whatever a client sends.
 */
#include "gw_lang.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "cm_mem.h"

#define GW_MSG_KEY(e, k) [GW_MSG_##e] = #k,
static const char *const keys[GW_MSG_COUNT] = {GW_MSG_LIST(GW_MSG_KEY)};
#undef GW_MSG_KEY

/* French typography: a no-break space before ':' and ';', a narrow one as the digit group
 * separator. */
#define NBSP  "\u00a0"
#define NNBSP "\u202f"

static const char *const en[GW_MSG_COUNT] = {
    [GW_MSG_SKIP] = "Skip to the queue",
    [GW_MSG_WAITING_ROOM] = "Waiting room:",
    [GW_MSG_PHASE_NEXT] = "Next phase from",
    [GW_MSG_CODE_LABEL] = "This part of the sale is for presale code holders. Enter your code "
                          "to take your place.",
    [GW_MSG_CODE_SUBMIT] = "Take my place",
    [GW_MSG_JOINING] = "Getting you a place in line…",
    [GW_MSG_KEEP_OPEN] = "Please keep this page open.",
    [GW_MSG_POW_LABEL] = "Checking your browser (this keeps ticket bots out)…",
    [GW_MSG_JOIN_BUTTON] = "Take my place in line",
    [GW_MSG_STAT_POSITION] = "Your place",
    [GW_MSG_STAT_IN_LINE] = "In line",
    [GW_MSG_STAT_WAIT] = "Est. wait",
    [GW_MSG_PROGRESS_LABEL] = "Progress to the front",
    [GW_MSG_PROGRESS_VALUE] = "{percent} percent of the way to the front",
    [GW_MSG_PAUSED] = "Admissions are paused for a moment. You keep your place.",
    [GW_MSG_QUEUED_NOTE] = "When it is your turn this page takes you to the sale by itself. "
                           "Refreshing it or opening a second tab does not lose or change your "
                           "place.",
    [GW_MSG_STATUS] = "You are number {position} in line. Estimated wait: {eta}.",
    [GW_MSG_ETA_UNKNOWN] = "calculating",
    [GW_MSG_ETA_UNDER_MINUTE] = "under a minute",
    [GW_MSG_ETA_MINUTE] = "about 1 minute",
    [GW_MSG_ETA_MINUTES] = "about {minutes} minutes",
    [GW_MSG_ETA_HOURS] = "about {hours} h",
    [GW_MSG_ETA_HOURS_MINUTES] = "about {hours} h {minutes} min",
    [GW_MSG_PREQUEUE_LEAD] = "You are in the waiting room. When the sale opens, everyone here "
                             "gets a random place in line — arriving earlier or refreshing gives "
                             "no advantage.",
    [GW_MSG_OPENS_LABEL] = "The sale opens",
    [GW_MSG_OPENS_SOON] = "soon",
    [GW_MSG_PREQUEUE_ONE] = "{count} person is waiting with you.",
    [GW_MSG_PREQUEUE_MANY] = "{count} people are waiting with you.",
    [GW_MSG_OPENS_IN] = "Opens in",
    [GW_MSG_OPENING] = "Opening…",
    [GW_MSG_COUNTDOWN_DAY] = "1 day",
    [GW_MSG_COUNTDOWN_DAYS] = "{days} days",
    [GW_MSG_COUNTDOWN_ARIA] = "{hours} hours {minutes} minutes {seconds} seconds",
    [GW_MSG_PREQUEUE_NOTE] = "Keep this page open; it moves you into the queue by itself.",
    [GW_MSG_ADMITTED_LEAD] = "It is your turn. Taking you to the sale…",
    [GW_MSG_CONTINUE] = "Continue to the sale",
    [GW_MSG_ADMITTED_NOTE] = "Your access is valid for a limited time.",
    [GW_MSG_SOLD_OUT_LEAD] = "Everything for this event has been sold.",
    [GW_MSG_SOLD_OUT_NOTE] = "Thank you for waiting. Nobody further down the line will be let "
                             "in, so there is no need to keep this page open.",
    [GW_MSG_RETURNS_LEAD] = "Sold out, for now.",
    [GW_MSG_RETURNS_NOTE] = "Every ticket is sold or in another fan's basket. Tickets that are not "
                            "bought come back to this line, in order: keep this page open to keep "
                            "your place.",
    [GW_MSG_LEFT_ONE] = "{count} ticket left.",
    [GW_MSG_LEFT_MANY] = "{count} tickets left.",
    [GW_MSG_CLOSED_LEAD] = "This waiting room is closed and is not letting anyone in.",
    [GW_MSG_CLOSED_NOTE] = "There is no need to keep this page open.",
    [GW_MSG_NET] = "Connection problem — retrying…",
    [GW_MSG_REFRESH_NOTE] = "JavaScript is off: this page reloads by itself {every}.",
    [GW_MSG_REFRESH_SECOND] = "every second",
    [GW_MSG_REFRESH_SECONDS] = "every {seconds} seconds",
    [GW_MSG_FOOTER] = "Queue status is checked automatically. Do not open many tabs: it does "
                      "not move you forward.",
    [GW_MSG_TITLE_NEW] = "Joining the queue",
    [GW_MSG_TITLE_QUEUED] = "You are in the queue",
    [GW_MSG_TITLE_PREQUEUE] = "The sale has not started yet",
    [GW_MSG_TITLE_ADMITTED] = "It is your turn",
    [GW_MSG_TITLE_SOLD_OUT] = "Sold out",
    [GW_MSG_TITLE_CLOSED] = "This sale is closed",
    [GW_MSG_TITLE_ERROR] = "Something went wrong",
    [GW_MSG_TITLE_UNKNOWN] = "No such waiting room",
    [GW_MSG_TITLE_EXPIRED] = "Your turn has expired",
    [GW_MSG_TITLE_WAIT] = "Please wait a moment",
    [GW_MSG_TITLE_JAVASCRIPT] = "JavaScript is needed",
    [GW_MSG_ERROR_UNKNOWN] = "There is no waiting room at this address. Please check the link "
                             "you followed.",
    [GW_MSG_ERROR_EXPIRED] = "Your turn came, but the access it gave you has expired. Please "
                             "contact the organiser if you still want to buy.",
    [GW_MSG_ERROR_UNAVAILABLE] = "The waiting room is very busy right now. This page tries again "
                                 "by itself in a few seconds; please keep it open.",
    [GW_MSG_ERROR_BUSY] = "Many people are arriving from your network at once. This page gets "
                          "you a place in a moment; please keep it open.",
    [GW_MSG_ERROR_JAVASCRIPT] = "To keep ticket bots out, this waiting room asks your browser to "
                                "solve a small puzzle before it gives you a place, and that needs "
                                "JavaScript. Please turn JavaScript on for this site and reload "
                                "the page.",
    [GW_MSG_ERROR_NOT_OPEN] = "This waiting room is not open yet. Keep this page open: it checks "
                              "again by itself.",
    [GW_MSG_ERROR_WEBCRYPTO] = "This waiting room needs a browser that supports Web Crypto (an "
                               "up-to-date browser, over https).",
    [GW_MSG_ERROR_OTHER_BROWSER] = "This place in line belongs to the browser that joined. "
                                   "Please continue there.",
    [GW_MSG_ERROR_NO_WORKER] = "Your browser cannot run the check this waiting room needs. "
                               "Please try another browser.",
    [GW_MSG_TITLE_INVITE] = "By invitation",
    [GW_MSG_ERROR_INVITE] = "This waiting room is by invitation. Please follow the link the "
                            "ticket seller gave you.",
    [GW_MSG_ERROR_INVITE_INVALID] = "This invitation link is no longer valid. Please go back to "
                                    "the ticket seller's site and follow the link again.",
    [GW_MSG_CODE_CHECK] = "Please check your code.",
    [GW_MSG_CODE_MALFORMED] = "That is not a presale code. Please check each character.",
    [GW_MSG_CODE_UNKNOWN] = "We do not know this code. Please check it against your invitation.",
    [GW_MSG_CODE_REVOKED] = "This code has been withdrawn by the organiser.",
    [GW_MSG_CODE_USED_UP] = "This code has already been used as many times as it may be.",
    [GW_MSG_CODE_WRONG_PHASE] = "This code is for another part of the sale.",
    [GW_MSG_CODE_TOO_MANY] = "Too many codes tried. Please wait a moment and try again.",
    [GW_MSG_THOUSANDS_SEP] = ",",
};

static const char *const de[GW_MSG_COUNT] = {
    [GW_MSG_SKIP] = "Zur Warteschlange springen",
    [GW_MSG_WAITING_ROOM] = "Warteraum:",
    [GW_MSG_PHASE_NEXT] = "Nächste Phase ab",
    [GW_MSG_CODE_LABEL] = "Dieser Teil des Verkaufs ist Inhabern eines Vorverkaufscodes "
                          "vorbehalten. Geben Sie Ihren Code ein, um Ihren Platz einzunehmen.",
    [GW_MSG_CODE_SUBMIT] = "Platz sichern",
    [GW_MSG_JOINING] = "Wir reihen Sie in die Warteschlange ein …",
    [GW_MSG_KEEP_OPEN] = "Bitte lassen Sie diese Seite geöffnet.",
    [GW_MSG_POW_LABEL] = "Ihr Browser wird geprüft (das hält Ticket-Bots fern) …",
    [GW_MSG_JOIN_BUTTON] = "Platz in der Warteschlange sichern",
    [GW_MSG_STAT_POSITION] = "Ihr Platz",
    [GW_MSG_STAT_IN_LINE] = "In der Schlange",
    [GW_MSG_STAT_WAIT] = "Wartezeit ca.",
    [GW_MSG_PROGRESS_LABEL] = "Fortschritt nach vorn",
    [GW_MSG_PROGRESS_VALUE] = "{percent} Prozent des Weges nach vorn",
    [GW_MSG_PAUSED] = "Der Einlass ist kurz unterbrochen. Ihr Platz bleibt erhalten.",
    [GW_MSG_QUEUED_NOTE] = "Wenn Sie an der Reihe sind, bringt Sie diese Seite von selbst zum "
                           "Verkauf. Neu laden oder ein zweiter Tab kostet Sie Ihren Platz nicht "
                           "und ändert ihn nicht.",
    [GW_MSG_STATUS] = "Sie sind Nummer {position} in der Warteschlange. Geschätzte Wartezeit: "
                      "{eta}.",
    [GW_MSG_ETA_UNKNOWN] = "wird berechnet",
    [GW_MSG_ETA_UNDER_MINUTE] = "unter einer Minute",
    [GW_MSG_ETA_MINUTE] = "etwa 1 Minute",
    [GW_MSG_ETA_MINUTES] = "etwa {minutes} Minuten",
    [GW_MSG_ETA_HOURS] = "etwa {hours} Std.",
    [GW_MSG_ETA_HOURS_MINUTES] = "etwa {hours} Std. {minutes} Min.",
    [GW_MSG_PREQUEUE_LEAD] = "Sie sind im Warteraum. Sobald der Verkauf beginnt, erhalten alle "
                             "hier einen zufälligen Platz in der Warteschlange – wer früher kommt "
                             "oder neu lädt, hat keinen Vorteil.",
    [GW_MSG_OPENS_LABEL] = "Verkaufsstart:",
    [GW_MSG_OPENS_SOON] = "in Kürze",
    [GW_MSG_PREQUEUE_ONE] = "{count} Person wartet mit Ihnen.",
    [GW_MSG_PREQUEUE_MANY] = "{count} Personen warten mit Ihnen.",
    [GW_MSG_OPENS_IN] = "Beginnt in",
    [GW_MSG_OPENING] = "Wird geöffnet …",
    [GW_MSG_COUNTDOWN_DAY] = "1 Tag",
    [GW_MSG_COUNTDOWN_DAYS] = "{days} Tage",
    [GW_MSG_COUNTDOWN_ARIA] = "{hours} Stunden {minutes} Minuten {seconds} Sekunden",
    [GW_MSG_PREQUEUE_NOTE] = "Lassen Sie diese Seite geöffnet; sie bringt Sie von selbst in die "
                             "Warteschlange.",
    [GW_MSG_ADMITTED_LEAD] = "Sie sind an der Reihe. Wir bringen Sie zum Verkauf …",
    [GW_MSG_CONTINUE] = "Weiter zum Verkauf",
    [GW_MSG_ADMITTED_NOTE] = "Ihr Zugang ist nur begrenzte Zeit gültig.",
    [GW_MSG_SOLD_OUT_LEAD] = "Für diese Veranstaltung ist alles verkauft.",
    [GW_MSG_SOLD_OUT_NOTE] = "Danke fürs Warten. Aus der Warteschlange wird niemand mehr "
                             "eingelassen, Sie müssen diese Seite also nicht geöffnet lassen.",
    [GW_MSG_RETURNS_LEAD] = "Ausverkauft – vorerst.",
    [GW_MSG_RETURNS_NOTE] = "Jedes Ticket ist verkauft oder liegt im Warenkorb eines anderen Fans. "
                            "Tickets, die nicht gekauft werden, kommen der Reihe nach in diese "
                            "Warteschlange zurück: Lassen Sie diese Seite offen, um Ihren Platz zu "
                            "behalten.",
    [GW_MSG_LEFT_ONE] = "Noch {count} Ticket.",
    [GW_MSG_LEFT_MANY] = "Noch {count} Tickets.",
    [GW_MSG_CLOSED_LEAD] = "Dieser Warteraum ist geschlossen und lässt niemanden ein.",
    [GW_MSG_CLOSED_NOTE] = "Sie müssen diese Seite nicht geöffnet lassen.",
    [GW_MSG_NET] = "Verbindungsproblem – neuer Versuch …",
    [GW_MSG_REFRESH_NOTE] = "JavaScript ist ausgeschaltet: Diese Seite lädt sich {every} von "
                            "selbst neu.",
    [GW_MSG_REFRESH_SECOND] = "jede Sekunde",
    [GW_MSG_REFRESH_SECONDS] = "alle {seconds} Sekunden",
    [GW_MSG_FOOTER] = "Der Stand der Warteschlange wird automatisch abgefragt. Öffnen Sie keine "
                      "weiteren Tabs: Das bringt Sie nicht schneller nach vorn.",
    [GW_MSG_TITLE_NEW] = "Sie werden eingereiht",
    [GW_MSG_TITLE_QUEUED] = "Sie sind in der Warteschlange",
    [GW_MSG_TITLE_PREQUEUE] = "Der Verkauf hat noch nicht begonnen",
    [GW_MSG_TITLE_ADMITTED] = "Sie sind an der Reihe",
    [GW_MSG_TITLE_SOLD_OUT] = "Ausverkauft",
    [GW_MSG_TITLE_CLOSED] = "Dieser Verkauf ist geschlossen",
    [GW_MSG_TITLE_ERROR] = "Etwas ist schiefgelaufen",
    [GW_MSG_TITLE_UNKNOWN] = "Diesen Warteraum gibt es nicht",
    [GW_MSG_TITLE_EXPIRED] = "Ihr Zugang ist abgelaufen",
    [GW_MSG_TITLE_WAIT] = "Bitte einen Moment Geduld",
    [GW_MSG_TITLE_JAVASCRIPT] = "JavaScript wird benötigt",
    [GW_MSG_ERROR_UNKNOWN] = "Unter dieser Adresse gibt es keinen Warteraum. Bitte prüfen Sie den "
                             "Link, dem Sie gefolgt sind.",
    [GW_MSG_ERROR_EXPIRED] = "Sie waren an der Reihe, doch Ihr Zugang ist inzwischen abgelaufen. "
                             "Wenn Sie noch kaufen möchten, wenden Sie sich bitte an den "
                             "Veranstalter.",
    [GW_MSG_ERROR_UNAVAILABLE] = "Der Warteraum ist gerade sehr ausgelastet. Diese Seite versucht "
                                 "es in wenigen Sekunden von selbst erneut; bitte lassen Sie sie "
                                 "geöffnet.",
    [GW_MSG_ERROR_BUSY] = "Aus Ihrem Netzwerk kommen gerade sehr viele Menschen gleichzeitig. "
                          "Diese Seite besorgt Ihnen gleich einen Platz; bitte lassen Sie sie "
                          "geöffnet.",
    [GW_MSG_ERROR_JAVASCRIPT] = "Um Ticket-Bots fernzuhalten, lässt dieser Warteraum Ihren Browser "
                                "ein kleines Rätsel lösen, bevor er Ihnen einen Platz gibt – dafür "
                                "wird JavaScript benötigt. Bitte schalten Sie JavaScript für diese "
                                "Website ein und laden Sie die Seite neu.",
    [GW_MSG_ERROR_NOT_OPEN] = "Dieser Warteraum ist noch nicht geöffnet. Lassen Sie diese Seite "
                              "geöffnet: Sie prüft von selbst erneut.",
    [GW_MSG_ERROR_WEBCRYPTO] = "Dieser Warteraum braucht einen Browser mit Web Crypto (einen "
                               "aktuellen Browser, über https).",
    [GW_MSG_ERROR_OTHER_BROWSER] = "Dieser Platz gehört dem Browser, mit dem Sie sich angestellt "
                                   "haben. Bitte machen Sie dort weiter.",
    [GW_MSG_ERROR_NO_WORKER] = "Ihr Browser kann die Prüfung, die dieser Warteraum verlangt, "
                               "nicht ausführen. Bitte versuchen Sie es mit einem anderen "
                               "Browser.",
    [GW_MSG_TITLE_INVITE] = "Nur mit Einladung",
    [GW_MSG_ERROR_INVITE] = "Dieser Warteraum ist nur mit Einladung zugänglich. Bitte folgen "
                            "Sie dem Link, den Sie vom Ticketverkäufer erhalten haben.",
    [GW_MSG_ERROR_INVITE_INVALID] = "Dieser Einladungslink ist nicht mehr gültig. Bitte kehren Sie "
                                    "zur Website des Ticketverkäufers zurück und folgen Sie dem "
                                    "Link erneut.",
    [GW_MSG_CODE_CHECK] = "Bitte prüfen Sie Ihren Code.",
    [GW_MSG_CODE_MALFORMED] = "Das ist kein Vorverkaufscode. Bitte prüfen Sie jedes Zeichen.",
    [GW_MSG_CODE_UNKNOWN] = "Diesen Code kennen wir nicht. Bitte vergleichen Sie ihn mit Ihrer "
                            "Einladung.",
    [GW_MSG_CODE_REVOKED] = "Dieser Code wurde vom Veranstalter zurückgezogen.",
    [GW_MSG_CODE_USED_UP] = "Dieser Code wurde bereits so oft eingelöst, wie er darf.",
    [GW_MSG_CODE_WRONG_PHASE] = "Dieser Code gilt für einen anderen Teil des Verkaufs.",
    [GW_MSG_CODE_TOO_MANY] = "Zu viele Codes versucht. Bitte warten Sie einen Moment und "
                             "versuchen Sie es dann erneut.",
    [GW_MSG_THOUSANDS_SEP] = ".",
};

static const char *const fr[GW_MSG_COUNT] = {
    [GW_MSG_SKIP] = "Aller à la file d’attente",
    [GW_MSG_WAITING_ROOM] = "Salle d’attente" NBSP ":",
    [GW_MSG_PHASE_NEXT] = "Phase suivante à partir du",
    [GW_MSG_CODE_LABEL] = "Cette partie de la vente est réservée aux détenteurs d’un code de "
                          "prévente. Saisissez votre code pour prendre votre place.",
    [GW_MSG_CODE_SUBMIT] = "Prendre ma place",
    [GW_MSG_JOINING] = "Nous vous attribuons une place dans la file…",
    [GW_MSG_KEEP_OPEN] = "Merci de garder cette page ouverte.",
    [GW_MSG_POW_LABEL] = "Vérification de votre navigateur (pour tenir les robots à l’écart)…",
    [GW_MSG_JOIN_BUTTON] = "Prendre ma place dans la file",
    [GW_MSG_STAT_POSITION] = "Votre place",
    [GW_MSG_STAT_IN_LINE] = "Dans la file",
    [GW_MSG_STAT_WAIT] = "Attente estimée",
    [GW_MSG_PROGRESS_LABEL] = "Progression dans la file",
    [GW_MSG_PROGRESS_VALUE] = "{percent}" NBSP "% du chemin parcouru",
    [GW_MSG_PAUSED] = "Les entrées sont suspendues un instant. Vous gardez votre place.",
    [GW_MSG_QUEUED_NOTE] = "Quand ce sera votre tour, cette page vous emmènera d’elle-même vers "
                           "la vente. Actualiser la page ou ouvrir un second onglet ne vous fait "
                           "ni perdre ni changer de place.",
    [GW_MSG_STATUS] =
        "Vous êtes numéro {position} dans la file. Attente estimée" NBSP ":" NBSP "{eta}.",
    [GW_MSG_ETA_UNKNOWN] = "calcul en cours",
    [GW_MSG_ETA_UNDER_MINUTE] = "moins d’une minute",
    [GW_MSG_ETA_MINUTE] = "environ 1 minute",
    [GW_MSG_ETA_MINUTES] = "environ {minutes} minutes",
    [GW_MSG_ETA_HOURS] = "environ {hours} h",
    [GW_MSG_ETA_HOURS_MINUTES] = "environ {hours} h {minutes} min",
    [GW_MSG_PREQUEUE_LEAD] = "Vous êtes dans la salle d’attente. À l’ouverture de la vente, "
                             "chaque personne présente reçoit une place tirée au sort dans la "
                             "file — arriver plus tôt ou actualiser la page ne donne aucun "
                             "avantage.",
    [GW_MSG_OPENS_LABEL] = "Ouverture de la vente" NBSP ":",
    [GW_MSG_OPENS_SOON] = "bientôt",
    [GW_MSG_PREQUEUE_ONE] = "{count} personne attend avec vous.",
    [GW_MSG_PREQUEUE_MANY] = "{count} personnes attendent avec vous.",
    [GW_MSG_OPENS_IN] = "Ouverture dans",
    [GW_MSG_OPENING] = "Ouverture…",
    [GW_MSG_COUNTDOWN_DAY] = "1 jour",
    [GW_MSG_COUNTDOWN_DAYS] = "{days} jours",
    [GW_MSG_COUNTDOWN_ARIA] = "{hours} heures {minutes} minutes {seconds} secondes",
    [GW_MSG_PREQUEUE_NOTE] =
        "Gardez cette page ouverte" NBSP ";" NBSP "elle vous fera entrer dans la file d’elle-même.",
    [GW_MSG_ADMITTED_LEAD] = "C’est votre tour. Nous vous emmenons vers la vente…",
    [GW_MSG_CONTINUE] = "Continuer vers la vente",
    [GW_MSG_ADMITTED_NOTE] = "Votre accès n’est valable que pendant une durée limitée.",
    [GW_MSG_SOLD_OUT_LEAD] = "Tout a été vendu pour cet événement.",
    [GW_MSG_SOLD_OUT_NOTE] =
        "Merci d’avoir patienté. Plus personne ne sera admis depuis la file" NBSP ";" NBSP
        "inutile de garder cette page ouverte.",
    [GW_MSG_RETURNS_LEAD] = "Complet, pour l’instant.",
    [GW_MSG_RETURNS_NOTE] =
        "Chaque billet est vendu ou dans le panier d’un autre fan. Les billets qui ne sont pas "
        "achetés reviennent dans cette file, dans l’ordre" NBSP ":" NBSP
        "gardez cette page ouverte pour garder votre place.",
    [GW_MSG_LEFT_ONE] = "Plus que {count} billet.",
    [GW_MSG_LEFT_MANY] = "Plus que {count} billets.",
    [GW_MSG_CLOSED_LEAD] = "Cette salle d’attente est fermée et ne laisse entrer personne.",
    [GW_MSG_CLOSED_NOTE] = "Inutile de garder cette page ouverte.",
    [GW_MSG_NET] = "Problème de connexion — nouvelle tentative…",
    [GW_MSG_REFRESH_NOTE] =
        "JavaScript est désactivé" NBSP ":" NBSP "cette page se recharge d’elle-même {every}.",
    [GW_MSG_REFRESH_SECOND] = "chaque seconde",
    [GW_MSG_REFRESH_SECONDS] = "toutes les {seconds} secondes",
    [GW_MSG_FOOTER] = "L’état de la file est vérifié automatiquement. N’ouvrez pas plusieurs "
                      "onglets" NBSP ":" NBSP "cela ne vous fait pas avancer.",
    [GW_MSG_TITLE_NEW] = "Entrée dans la file",
    [GW_MSG_TITLE_QUEUED] = "Vous êtes dans la file",
    [GW_MSG_TITLE_PREQUEUE] = "La vente n’a pas encore commencé",
    [GW_MSG_TITLE_ADMITTED] = "C’est votre tour",
    [GW_MSG_TITLE_SOLD_OUT] = "Complet",
    [GW_MSG_TITLE_CLOSED] = "Cette vente est fermée",
    [GW_MSG_TITLE_ERROR] = "Un problème est survenu",
    [GW_MSG_TITLE_UNKNOWN] = "Salle d’attente introuvable",
    [GW_MSG_TITLE_EXPIRED] = "Votre tour a expiré",
    [GW_MSG_TITLE_WAIT] = "Merci de patienter un instant",
    [GW_MSG_TITLE_JAVASCRIPT] = "JavaScript est nécessaire",
    [GW_MSG_ERROR_UNKNOWN] = "Il n’y a pas de salle d’attente à cette adresse. Merci de vérifier "
                             "le lien que vous avez suivi.",
    [GW_MSG_ERROR_EXPIRED] = "Votre tour est venu, mais l’accès qu’il vous donnait a expiré. "
                             "Contactez l’organisateur si vous souhaitez toujours acheter.",
    [GW_MSG_ERROR_UNAVAILABLE] =
        "La salle d’attente est très sollicitée en ce moment. Cette page "
        "réessaie d’elle-même dans quelques secondes" NBSP ";" NBSP "merci de la garder ouverte.",
    [GW_MSG_ERROR_BUSY] = "Beaucoup de personnes arrivent en même temps depuis votre réseau. "
                          "Cette page vous obtient une place dans un instant" NBSP ";" NBSP
                          "merci de la garder ouverte.",
    [GW_MSG_ERROR_JAVASCRIPT] = "Pour tenir les robots à l’écart, cette salle d’attente demande à "
                                "votre navigateur de résoudre une petite énigme avant de vous "
                                "donner une place, ce qui nécessite JavaScript. Activez "
                                "JavaScript pour ce site, puis rechargez la page.",
    [GW_MSG_ERROR_NOT_OPEN] = "Cette salle d’attente n’est pas encore ouverte. Gardez cette page "
                              "ouverte" NBSP ":" NBSP "elle vérifie à nouveau d’elle-même.",
    [GW_MSG_ERROR_WEBCRYPTO] = "Cette salle d’attente nécessite un navigateur compatible avec Web "
                               "Crypto (un navigateur à jour, en https).",
    [GW_MSG_ERROR_OTHER_BROWSER] = "Cette place dans la file appartient au navigateur qui l’a "
                                   "prise. Merci de continuer depuis celui-ci.",
    [GW_MSG_ERROR_NO_WORKER] = "Votre navigateur ne peut pas effectuer la vérification "
                               "qu’exige cette salle d’attente. Essayez avec un autre "
                               "navigateur.",
    [GW_MSG_TITLE_INVITE] = "Sur invitation",
    [GW_MSG_ERROR_INVITE] = "Cette salle d’attente est sur invitation. Suivez le lien que le "
                            "vendeur de billets vous a donné.",
    [GW_MSG_ERROR_INVITE_INVALID] = "Ce lien d’invitation n’est plus valable. Retournez sur le "
                                    "site du vendeur de billets et suivez à nouveau le lien.",
    [GW_MSG_CODE_CHECK] = "Merci de vérifier votre code.",
    [GW_MSG_CODE_MALFORMED] = "Ce n’est pas un code de prévente. Vérifiez chaque caractère.",
    [GW_MSG_CODE_UNKNOWN] = "Nous ne connaissons pas ce code. Comparez-le avec votre invitation.",
    [GW_MSG_CODE_REVOKED] = "Ce code a été retiré par l’organisateur.",
    [GW_MSG_CODE_USED_UP] = "Ce code a déjà été utilisé autant de fois que permis.",
    [GW_MSG_CODE_WRONG_PHASE] = "Ce code est valable pour une autre partie de la vente.",
    [GW_MSG_CODE_TOO_MANY] = "Trop de codes essayés. Patientez un instant, puis réessayez.",
    [GW_MSG_THOUSANDS_SEP] = NNBSP,
};

static const char *const es[GW_MSG_COUNT] = {
    [GW_MSG_SKIP] = "Ir a la cola",
    [GW_MSG_WAITING_ROOM] = "Sala de espera:",
    [GW_MSG_PHASE_NEXT] = "Siguiente fase a partir del",
    [GW_MSG_CODE_LABEL] = "Esta parte de la venta es solo para quienes tienen un código de "
                          "preventa. Introduce tu código para ocupar tu lugar.",
    [GW_MSG_CODE_SUBMIT] = "Ocupar mi lugar",
    [GW_MSG_JOINING] = "Buscándote un lugar en la cola…",
    [GW_MSG_KEEP_OPEN] = "Mantén esta página abierta.",
    [GW_MSG_POW_LABEL] = "Comprobando tu navegador (así dejamos fuera a los bots de entradas)…",
    [GW_MSG_JOIN_BUTTON] = "Ocupar mi lugar en la cola",
    [GW_MSG_STAT_POSITION] = "Tu lugar",
    [GW_MSG_STAT_IN_LINE] = "En la cola",
    [GW_MSG_STAT_WAIT] = "Espera aprox.",
    [GW_MSG_PROGRESS_LABEL] = "Avance hacia el principio",
    [GW_MSG_PROGRESS_VALUE] = "{percent} por ciento del camino hacia el principio",
    [GW_MSG_PAUSED] = "Los accesos están en pausa un momento. Conservas tu lugar.",
    [GW_MSG_QUEUED_NOTE] = "Cuando sea tu turno, esta página te llevará a la venta "
                           "automáticamente. Recargarla o abrir una segunda pestaña no te hace "
                           "perder ni cambiar tu lugar.",
    [GW_MSG_STATUS] = "Eres el número {position} de la cola. Espera estimada: {eta}.",
    [GW_MSG_ETA_UNKNOWN] = "calculando",
    [GW_MSG_ETA_UNDER_MINUTE] = "menos de un minuto",
    [GW_MSG_ETA_MINUTE] = "alrededor de 1 minuto",
    [GW_MSG_ETA_MINUTES] = "alrededor de {minutes} minutos",
    [GW_MSG_ETA_HOURS] = "alrededor de {hours} h",
    [GW_MSG_ETA_HOURS_MINUTES] = "alrededor de {hours} h {minutes} min",
    [GW_MSG_PREQUEUE_LEAD] = "Estás en la sala de espera. Cuando abra la venta, todas las "
                             "personas que estén aquí recibirán un lugar al azar en la cola: "
                             "llegar antes o recargar la página no da ninguna ventaja.",
    [GW_MSG_OPENS_LABEL] = "Apertura de la venta:",
    [GW_MSG_OPENS_SOON] = "en breve",
    [GW_MSG_PREQUEUE_ONE] = "{count} persona espera contigo.",
    [GW_MSG_PREQUEUE_MANY] = "{count} personas esperan contigo.",
    [GW_MSG_OPENS_IN] = "Abre en",
    [GW_MSG_OPENING] = "Abriendo…",
    [GW_MSG_COUNTDOWN_DAY] = "1 día",
    [GW_MSG_COUNTDOWN_DAYS] = "{days} días",
    [GW_MSG_COUNTDOWN_ARIA] = "{hours} horas {minutes} minutos {seconds} segundos",
    [GW_MSG_PREQUEUE_NOTE] = "Mantén esta página abierta; te pasará a la cola automáticamente.",
    [GW_MSG_ADMITTED_LEAD] = "Es tu turno. Te llevamos a la venta…",
    [GW_MSG_CONTINUE] = "Continuar a la venta",
    [GW_MSG_ADMITTED_NOTE] = "Tu acceso es válido durante un tiempo limitado.",
    [GW_MSG_SOLD_OUT_LEAD] = "Se ha vendido todo para este evento.",
    [GW_MSG_SOLD_OUT_NOTE] = "Gracias por esperar. Ya no se dejará pasar a nadie más de la cola, "
                             "así que no hace falta que mantengas esta página abierta.",
    [GW_MSG_RETURNS_LEAD] = "Agotado, por ahora.",
    [GW_MSG_RETURNS_NOTE] =
        "Cada entrada está vendida o en la cesta de otro fan. Las entradas que no "
        "se compren vuelven a esta cola, por orden: mantén esta página abierta "
        "para conservar tu lugar.",
    [GW_MSG_LEFT_ONE] = "Queda {count} entrada.",
    [GW_MSG_LEFT_MANY] = "Quedan {count} entradas.",
    [GW_MSG_CLOSED_LEAD] = "Esta sala de espera está cerrada y no deja pasar a nadie.",
    [GW_MSG_CLOSED_NOTE] = "No hace falta que mantengas esta página abierta.",
    [GW_MSG_NET] = "Problema de conexión; reintentando…",
    [GW_MSG_REFRESH_NOTE] = "JavaScript está desactivado: esta página se recarga sola {every}.",
    [GW_MSG_REFRESH_SECOND] = "cada segundo",
    [GW_MSG_REFRESH_SECONDS] = "cada {seconds} segundos",
    [GW_MSG_FOOTER] = "El estado de la cola se comprueba automáticamente. No abras muchas "
                      "pestañas: no te hace avanzar.",
    [GW_MSG_TITLE_NEW] = "Entrando en la cola",
    [GW_MSG_TITLE_QUEUED] = "Estás en la cola",
    [GW_MSG_TITLE_PREQUEUE] = "La venta aún no ha empezado",
    [GW_MSG_TITLE_ADMITTED] = "Es tu turno",
    [GW_MSG_TITLE_SOLD_OUT] = "Agotado",
    [GW_MSG_TITLE_CLOSED] = "Esta venta está cerrada",
    [GW_MSG_TITLE_ERROR] = "Algo ha salido mal",
    [GW_MSG_TITLE_UNKNOWN] = "Esta sala de espera no existe",
    [GW_MSG_TITLE_EXPIRED] = "Tu turno ha caducado",
    [GW_MSG_TITLE_WAIT] = "Espera un momento",
    [GW_MSG_TITLE_JAVASCRIPT] = "Se necesita JavaScript",
    [GW_MSG_ERROR_UNKNOWN] = "No hay ninguna sala de espera en esta dirección. Comprueba el "
                             "enlace que has seguido.",
    [GW_MSG_ERROR_EXPIRED] = "Te llegó el turno, pero el acceso que te dio ha caducado. Si aún "
                             "quieres comprar, ponte en contacto con el organizador.",
    [GW_MSG_ERROR_UNAVAILABLE] = "La sala de espera está muy concurrida en este momento. Esta "
                                 "página volverá a intentarlo sola en unos segundos; mantenla "
                                 "abierta.",
    [GW_MSG_ERROR_BUSY] = "Están llegando muchas personas a la vez desde tu red. Esta página te "
                          "conseguirá un lugar en un momento; mantenla abierta.",
    [GW_MSG_ERROR_JAVASCRIPT] = "Para dejar fuera a los bots de entradas, esta sala de espera "
                                "pide a tu navegador que resuelva un pequeño reto antes de darte "
                                "un lugar, y para eso hace falta JavaScript. Activa JavaScript "
                                "para este sitio y vuelve a cargar la página.",
    [GW_MSG_ERROR_NOT_OPEN] = "Esta sala de espera aún no está abierta. Mantén esta página "
                              "abierta: volverá a comprobarlo sola.",
    [GW_MSG_ERROR_WEBCRYPTO] = "Esta sala de espera necesita un navegador compatible con Web "
                               "Crypto (un navegador actualizado, por https).",
    [GW_MSG_ERROR_OTHER_BROWSER] = "Este lugar en la cola pertenece al navegador con el que "
                                   "entraste. Continúa desde allí.",
    [GW_MSG_ERROR_NO_WORKER] = "Tu navegador no puede hacer la comprobación que exige esta sala "
                               "de espera. Prueba con otro navegador.",
    [GW_MSG_TITLE_INVITE] = "Solo con invitación",
    [GW_MSG_ERROR_INVITE] = "Esta sala de espera es solo con invitación. Sigue el enlace que te "
                            "dio el vendedor de entradas.",
    [GW_MSG_ERROR_INVITE_INVALID] = "Este enlace de invitación ya no es válido. Vuelve al sitio "
                                    "del vendedor de entradas y sigue el enlace de nuevo.",
    [GW_MSG_CODE_CHECK] = "Comprueba tu código.",
    [GW_MSG_CODE_MALFORMED] = "Eso no es un código de preventa. Comprueba cada carácter.",
    [GW_MSG_CODE_UNKNOWN] = "No reconocemos este código. Compáralo con tu invitación.",
    [GW_MSG_CODE_REVOKED] = "El organizador ha retirado este código.",
    [GW_MSG_CODE_USED_UP] = "Este código ya se ha usado todas las veces permitidas.",
    [GW_MSG_CODE_WRONG_PHASE] = "Este código es para otra parte de la venta.",
    [GW_MSG_CODE_TOO_MANY] = "Has probado demasiados códigos. Espera un momento y vuelve a "
                             "intentarlo.",
    [GW_MSG_THOUSANDS_SEP] = ".",
};

#define NBUILTIN 4

struct gw_langs {
    size_t n;
    gw_lang_t l[GW_LANG_MAX];
    const char *tags[GW_LANG_MAX]; /* l[i].tag, for gw_lang_pick */
};

static const gw_langs_t builtin_set = {
    .n = NBUILTIN,
    .l = {{"en", en, false}, {"de", de, false}, {"fr", fr, false}, {"es", es, false}},
    .tags = {"en", "de", "fr", "es"},
};

const char *gw_lang_key(gw_msg_t m)
{
    return m >= 0 && m < GW_MSG_COUNT ? keys[m] : "";
}

const char *gw_lang_msg(const gw_lang_t *lang, gw_msg_t m)
{
    if (m < 0 || m >= GW_MSG_COUNT)
        return "";
    if (lang != NULL && lang->msg != NULL && lang->msg[m] != NULL)
        return lang->msg[m];
    return en[m] ? en[m] : "";
}

/* --- Accept-Language ------------------------------------------------------------------- */

static bool is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool is_alnum(char c)
{
    return is_alpha(c) || (c >= '0' && c <= '9');
}

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* A language-range of RFC 4647: "*" or 1*8ALPHA *("-" 1*8alphanum). */
static bool range_valid(const char *s, size_t n)
{
    if (n == 1 && s[0] == '*')
        return true;
    size_t i = 0, run = 0;
    bool first = true;
    for (; i < n; i++) {
        if (s[i] == '-') {
            if (run == 0)
                return false;
            run = 0;
            first = false;
            continue;
        }
        if (!(first ? is_alpha(s[i]) : is_alnum(s[i])) || ++run > 8)
            return false;
    }
    return run > 0;
}

/* qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] ), in thousandths; -1 if not. */
static int parse_q(const char *s, size_t n)
{
    if (n == 0 || (s[0] != '0' && s[0] != '1'))
        return -1;
    int q = (s[0] - '0') * 1000;
    if (n == 1)
        return q;
    if (s[1] != '.' || n > 5)
        return -1;
    int scale = 100;
    for (size_t i = 2; i < n; i++, scale /= 10) {
        if (s[i] < '0' || s[i] > '9' || (q == 1000 && s[i] != '0'))
            return -1;
        q += (s[i] - '0') * scale;
    }
    return q;
}

/*
 * One entry of the header, s[0..n): range [OWS ";" OWS "q=" qvalue]. Other parameters are
 * not defined for Accept-Language and make the entry malformed. *q in thousandths; the
 * range in [*r, *r + *rn). 0, or -1 when the entry is malformed.
 */
static int parse_entry(const char *s, size_t n, const char **r, size_t *rn, int *q)
{
    while (n > 0 && is_ows(*s))
        s++, n--;
    while (n > 0 && is_ows(s[n - 1]))
        n--;
    const char *semi = memchr(s, ';', n);
    size_t len = semi ? (size_t)(semi - s) : n;
    while (len > 0 && is_ows(s[len - 1]))
        len--;
    if (!range_valid(s, len))
        return -1;
    *r = s;
    *rn = len;
    *q = 1000;
    if (semi == NULL)
        return 0;
    const char *p = semi + 1, *end = s + n;
    while (p < end && is_ows(*p))
        p++;
    if (end - p < 2 || (p[0] != 'q' && p[0] != 'Q') || p[1] != '=')
        return -1;
    *q = parse_q(p + 2, (size_t)(end - p - 2));
    return *q < 0 ? -1 : 0;
}

/* How well range r matches tag: 2 equal, 1 one extends the other, 0 not at all. */
static int match(const char *r, size_t rn, const char *tag)
{
    size_t tn = strlen(tag);
    size_t n = rn < tn ? rn : tn;
    if (strncasecmp(r, tag, n) != 0)
        return 0;
    if (rn == tn)
        return 2;
    const char *longer = rn > tn ? r : tag;
    return longer[n] == '-' ? 1 : 0;
}

size_t gw_lang_pick(const char *accept_language, const char *const *tags, size_t n)
{
    if (accept_language == NULL || n == 0)
        return 0;
    size_t len = strnlen(accept_language, GW_LANG_HEADER_MAX);
    const char *p = accept_language, *end = accept_language + len;
    size_t best = 0;
    int best_q = 0, best_fit = 0, ranges = 0;
    while (p < end && ranges < GW_LANG_RANGES_MAX) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma ? comma : end;
        const char *r;
        size_t rn;
        int q;
        if (stop > p && parse_entry(p, (size_t)(stop - p), &r, &rn, &q) == 0) {
            ranges++;
            /* the first tag this range fits best: an exact one before an extended one */
            size_t pick = n;
            int fit = 0;
            if (rn == 1 && r[0] == '*') {
                pick = 0;
                fit = 1;
            }
            for (size_t i = 0; i < n && fit < 2 && !(rn == 1 && r[0] == '*'); i++) {
                int m = match(r, rn, tags[i]);
                if (m > fit) {
                    fit = m;
                    pick = i;
                }
            }
            if (pick < n && q > 0 && (q > best_q || (q == best_q && fit > best_fit))) {
                best = pick;
                best_q = q;
                best_fit = fit;
            }
        }
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    return best;
}

/* --- tags and files -------------------------------------------------------------------- */

bool gw_lang_tag_valid(const char *tag)
{
    size_t n = strlen(tag), i = 0, run = 0, subtags = 0;
    if (n == 0 || n > GW_LANG_TAG_MAX)
        return false;
    for (; i < n && tag[i] >= 'a' && tag[i] <= 'z'; i++)
        run++;
    if (run < 2 || run > 3)
        return false;
    while (i < n) {
        if (tag[i++] != '-' || ++subtags > 3)
            return false;
        run = 0;
        for (; i < n && ((tag[i] >= 'a' && tag[i] <= 'z') || (tag[i] >= '0' && tag[i] <= '9')); i++)
            run++;
        if (run < 1 || run > 8)
            return false;
    }
    return true;
}

const gw_langs_t *gw_langs_builtin(void)
{
    return &builtin_set;
}

size_t gw_langs_count(const gw_langs_t *l)
{
    return (l ? l : &builtin_set)->n;
}

const gw_lang_t *gw_langs_at(const gw_langs_t *l, size_t i)
{
    l = l ? l : &builtin_set;
    return i < l->n ? &l->l[i] : &l->l[0];
}

const gw_lang_t *gw_langs_choose(const gw_langs_t *l, const char *accept_language)
{
    l = l ? l : &builtin_set;
    return &l->l[gw_lang_pick(accept_language, l->tags, l->n)];
}

static void lang_free(gw_lang_t *g)
{
    if (!g->owned)
        return;
    for (size_t m = 0; m < GW_MSG_COUNT; m++)
        free((char *)g->msg[m]);
    free((void *)g->msg);
}

void gw_langs_free(gw_langs_t *l)
{
    if (l == NULL || l == &builtin_set)
        return;
    for (size_t i = 0; i < l->n; i++)
        lang_free(&l->l[i]);
    free(l);
}

static int find_key(const char *key)
{
    for (int m = 0; m < GW_MSG_COUNT; m++)
        if (strcmp(keys[m], key) == 0)
            return m;
    return -1;
}

static int find_tag(const gw_langs_t *l, const char *tag)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->l[i].tag, tag) == 0)
            return (int)i;
    return -1;
}

/* A message of a file: no control characters (jansson has checked the UTF-8). */
static bool text_ok(const char *s, size_t n)
{
    if (n > GW_LANG_MSG_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return false;
    return true;
}

/* One language file into l (a new language, or a built-in reworded). 0, or -1 + err. */
static int load_file(gw_langs_t *l, const char *dir, const char *tag, char *err, size_t errlen)
{
    int rc = -1;
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s.json", dir, tag);
    struct stat st;
    json_t *root = NULL;
    json_error_t jerr;
    const char **msg = NULL;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > GW_LANG_FILE_MAX) {
        snprintf(err, errlen, "%s: not a regular file of at most %d bytes", path, GW_LANG_FILE_MAX);
        goto out;
    }
    root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr); /* blocking-ok: start-up and
                                                                   the reload thread */
    if (root == NULL || !json_is_object(root)) {
        snprintf(err, errlen, "%s: not a JSON object (%s, line %d)", path,
                 root ? "another value" : jerr.text, jerr.line);
        goto out;
    }
    /* the messages it lacks: its own built-in, its primary language's, or English */
    int base = find_tag(l, tag);
    if (base < 0) {
        char primary[GW_LANG_TAG_MAX + 1];
        snprintf(primary, sizeof(primary), "%.*s", (int)strcspn(tag, "-"), tag);
        base = find_tag(l, primary);
    }
    const gw_lang_t *from = &l->l[base < 0 ? 0 : base];
    msg = cm_xcalloc(GW_MSG_COUNT, sizeof(*msg));
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        int m = find_key(key);
        if (m < 0 || !json_is_string(v) || !text_ok(json_string_value(v), json_string_length(v))) {
            snprintf(err, errlen,
                     m < 0 ? "%s: unknown key \"%.64s\" (docs/operations.md lists them)"
                           : "%s: \"%.64s\" must be a string of at most %d bytes without "
                             "control characters",
                     path, key, GW_LANG_MSG_MAX);
            goto out;
        }
        msg[m] = cm_xstrdup(json_string_value(v));
    }
    for (int m = 0; m < GW_MSG_COUNT; m++)
        if (msg[m] == NULL)
            msg[m] = cm_xstrdup(gw_lang_msg(from, (gw_msg_t)m));
    int at = find_tag(l, tag);
    if (at < 0 && l->n == GW_LANG_MAX) {
        snprintf(err, errlen, "%s: more than %d languages", path, GW_LANG_MAX);
        goto out;
    }
    if (at < 0)
        at = (int)l->n++;
    else
        lang_free(&l->l[at]);
    gw_lang_t *g = &l->l[at];
    snprintf(g->tag, sizeof(g->tag), "%s", tag);
    g->msg = msg;
    g->owned = true;
    l->tags[at] = g->tag;
    msg = NULL;
    rc = 0;
out:
    if (msg != NULL) {
        for (int m = 0; m < GW_MSG_COUNT; m++)
            free((char *)msg[m]);
        free(msg);
    }
    json_decref(root);
    return rc;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

gw_langs_t *gw_langs_load(const char *dir, char *err, size_t errlen)
{
    gw_langs_t *l = cm_xcalloc(1, sizeof(*l));
    l->n = NBUILTIN;
    for (size_t i = 0; i < NBUILTIN; i++) {
        l->l[i] = builtin_set.l[i];
        l->tags[i] = l->l[i].tag;
    }
    if (dir == NULL || dir[0] == '\0')
        return l;
    DIR *d = opendir(dir); /* blocking-ok: start-up and the reload thread */
    if (d == NULL) {
        snprintf(err, errlen, "page_languages_dir %s: %s", dir, strerror(errno));
        gw_langs_free(l);
        return NULL;
    }
    /* the files in name order, so a base language ("de") loads before "de-at" */
    char *names[GW_LANG_MAX * 2];
    size_t nnames = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) { /* blocking-ok: as above */
        size_t n = strlen(e->d_name);
        if (n <= 5 || strcmp(e->d_name + n - 5, ".json") != 0 || e->d_name[0] == '.')
            continue;
        char tag[GW_LANG_TAG_MAX + 1];
        if (n - 5 > GW_LANG_TAG_MAX || nnames == sizeof(names) / sizeof(names[0])) {
            snprintf(err, errlen, "page_languages_dir %s: %s: too long a name or too many files",
                     dir, e->d_name);
            rc = -1;
            break;
        }
        snprintf(tag, sizeof(tag), "%.*s", (int)(n - 5), e->d_name);
        if (!gw_lang_tag_valid(tag)) {
            snprintf(err, errlen,
                     "page_languages_dir %s: %s is not named <language tag>.json in lower case "
                     "(\"de\", \"pt-br\")",
                     dir, e->d_name);
            rc = -1;
            break;
        }
        names[nnames++] = cm_xstrdup(tag);
    }
    closedir(d);
    qsort(names, nnames, sizeof(names[0]), by_name);
    for (size_t i = 0; i < nnames; i++) {
        if (rc == 0 && load_file(l, dir, names[i], err, errlen) != 0)
            rc = -1;
        free(names[i]);
    }
    if (rc != 0) {
        gw_langs_free(l);
        return NULL;
    }
    return l;
}
